"""A number of the request that does not fit its column is the client's to fix: a 400 naming
it, not a 500 (`loraplex.errors._is_number_out_of_range`; the hostile-tenant suite's alias
case sent a 4,300-digit version number)."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

from loraplex.errors import _is_number_out_of_range


class _DriverError(Exception):
    sqlstate: str | None = None


def _raised_from(cause: BaseException) -> DBAPIError:
    """A DBAPIError wrapping a driver error raised from `cause`, as SQLAlchemy raises it."""
    try:
        try:
            raise cause
        except BaseException as exc:
            raise _DriverError("invalid input for query argument $2") from exc
    except _DriverError as driver:
        try:
            raise DBAPIError("SELECT 1", {}, driver) from driver
        except DBAPIError as wrapped:
            return wrapped


def test_an_int_the_driver_cannot_encode_is_out_of_range() -> None:
    assert _is_number_out_of_range(_raised_from(OverflowError("value out of int32 range")))


def test_a_number_postgresql_refuses_is_out_of_range() -> None:
    refused = _DriverError("integer out of range")
    refused.sqlstate = "22003"
    assert _is_number_out_of_range(DBAPIError("SELECT 1", {}, refused))


def test_other_database_errors_are_not() -> None:
    assert not _is_number_out_of_range(_raised_from(ValueError("something else")))
    assert not _is_number_out_of_range(DBAPIError("SELECT 1", {}, _DriverError("deadlock")))
