"""Reading the console's HTML forms: numbers, and values checked by the API's own schemas."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request
from litestar.datastructures import FormMultiDict

from loraplex.errors import InvalidInput

MAX_DIGITS = 18  # a form's whole numbers fit a 64-bit column; int() refuses 4,300 digits


async def provide_form(request: Request[Any, Any, Any]) -> FormMultiDict:
    """Dependency `form`: the posted form, every value of a repeated field kept."""
    return await request.form()


def number(form: FormMultiDict, field: str) -> int | None:
    """A whole number from a form field; None when empty, 400 when not a number or too big.

    Only ASCII digits count: "²".isdigit() is true but int() refuses it.
    """
    raw = str(form.get(field, "")).strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit()):
        raise InvalidInput(f"{field} must be a whole number, not '{raw[:20]}'", param=field)
    if len(raw) > MAX_DIGITS:
        raise InvalidInput(f"{field} is too large", param=field)
    return int(raw)


def decimal(form: FormMultiDict, field: str) -> float | None:
    """A positive number from a form field; None when empty, 400 when not one."""
    raw = str(form.get(field, "")).strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise InvalidInput(f"{field} must be a positive number, not '{raw[:20]}'", param=field)
    return value


def convert(value: Any, into: Any, param: str | None = None) -> Any:
    """Validate form values with the API's own schemas, as a 400 naming the field."""
    try:
        return msgspec.convert(value, into)
    except msgspec.ValidationError as exc:
        raise InvalidInput(str(exc), param=param) from exc
