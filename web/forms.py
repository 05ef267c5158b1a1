"""Reading the console's HTML forms: numbers, and values checked by the API's own schemas."""

from __future__ import annotations

from typing import Any

import litestar._kwargs.extractors
import litestar._parsers
import litestar.connection.request
import msgspec
from litestar import Request
from litestar.datastructures import FormMultiDict

from loraplex.errors import InvalidInput

MAX_DIGITS = 18  # a form's whole numbers fit a 64-bit column; int() refuses 4,300 digits
# The largest form of the console has about a dozen fields.
MAX_FORM_FIELDS = 256
_PARSE_FORM = litestar._parsers.parse_url_encoded_form_data.__wrapped__  # without its cache


def parse_form(encoded: bytes) -> dict[str, str | list[str]]:
    """Litestar's parser of url-encoded forms, with two changes a hostile client needs:

    - no cache: Litestar's keeps the last 1,024 bodies it parsed, and their fields, for the
      life of the process. 64 different 1 MB forms sent to `/login` before anyone signs in
      (the CSRF check parses the form first) grew the API 87 MiB; 1,024 would hold ~1.4 GiB.
    - at most `MAX_FORM_FIELDS` fields, counted before parsing: 120k empty fields parsed
      one by one held the event loop ~90 ms.
    """
    fields = encoded.count(b"&") + 1
    if fields > MAX_FORM_FIELDS:
        raise InvalidInput(f"the form has {fields} fields; at most {MAX_FORM_FIELDS} are allowed")
    return dict(_PARSE_FORM(encoded))


def install_form_parser() -> None:
    """Make Litestar parse url-encoded forms with `parse_form` (where `Request.form()` and
    the handlers' form parameters look the parser up)."""
    for module in (litestar.connection.request, litestar._kwargs.extractors):
        module.parse_url_encoded_form_data = parse_form  # type: ignore[attr-defined]


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
