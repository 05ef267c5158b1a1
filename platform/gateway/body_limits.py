"""Decoding a `/v1` JSON body on the event loop, with its cost bounded before it starts.

Bytes are bounded by Litestar (`request_max_body_size`, 1 MiB: a 128k-token prompt is about
512 KiB of text). Within those bytes the cost of `msgspec.json.decode` follows the number of
containers, not the bytes: a 1 MiB prompt string decodes in 1.7 ms, 1 MiB of `[],[],…`
(350,000 lists) in 70 to 300 ms, most of it the cyclic GC walking the young lists again and
again. So, before decoding:

- `{` and `[` are counted (a C scan, ~0.1 ms per MiB). The count is an upper bound on the
  containers (brackets inside strings count too), and over `MAX_CONTAINERS` the body is
  refused. A real request has a few thousand (2,048 messages of 3 each, 128 tools' schemas);
  a prompt of code has about one bracket in 25 bytes, 42,000 in a full 1 MiB.
- The decode runs with the GC paused: the objects it makes are all reachable from the
  result, so a collection in the middle can free nothing.

Depth needs no bound of ours: msgspec refuses nesting past the interpreter's recursion
limit with `RecursionError` (as a 400 here); the schema checks bound what is walked later.
Numbers need none either: msgspec refuses integers over 4,300 digits and floats that
overflow (`Integer value out of range`, `Number out of range`); typed fields bound the rest.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TypeVar

import msgspec

from loraplex.errors import InvalidInput

MAX_CONTAINERS = 65_536  # decodes in under 5 ms with the GC paused
T = TypeVar("T")


class BodyTooComplex(InvalidInput):
    """The body holds more objects and arrays than a request needs, or nests too deep."""

    code = "body_too_complex"


def container_bound(raw: bytes) -> int:
    """An upper bound on the objects and arrays in the JSON text `raw`."""
    return raw.count(b"{") + raw.count(b"[")


def decode_json(raw: bytes, kind: type[T], param_of: Callable[[str], str | None]) -> T:
    """`raw` decoded as `kind`, every failure an OpenAI-shaped 400 (`param_of` finds the
    parameter a msgspec error names)."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"request body is not valid UTF-8 (byte {exc.start})") from exc
    containers = container_bound(raw)
    if containers > MAX_CONTAINERS:
        raise BodyTooComplex(
            f"the request body has {containers} '{{' and '[' characters; at most "
            f"{MAX_CONTAINERS} are allowed (they are counted inside strings too)"
        )
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as exc:
        raise InvalidInput(str(exc), param=param_of(str(exc))) from exc
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}") from exc
    except RecursionError:
        raise BodyTooComplex("the request body nests objects and arrays too deeply") from None
    finally:
        if was_enabled:
            gc.enable()
