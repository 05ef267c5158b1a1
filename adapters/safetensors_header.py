"""Reads and checks a safetensors header without loading any tensor data.

The format: an 8-byte little-endian header length N, N bytes of JSON mapping tensor names to
`{dtype, shape, data_offsets}` (offsets relative to the end of the header), then the data.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

# Bounds checked before the costly step (reading and decoding the JSON, multiplying shapes).
# A LoRA header is ~140 bytes a tensor: Llama 3.1 405B's 126 layers x 7 projections x 2
# tensors is ~250 kB. The safetensors library itself allows 100 MB, which json.loads turns
# into ~1 GB of Python objects: far more than one upload may cost the process that checks it.
MAX_HEADER_BYTES = 1024 * 1024
MAX_TENSORS = 8192
# LoRA tensors are matrices; PEFT never writes more than 2 dimensions. Four leaves room for
# any real layout while keeping `math.prod` a product of a few small numbers.
MAX_DIMENSIONS = 4
# The largest hidden size of any open model is ~53k; 2**31 per dimension is no real limit, and
# keeps every product far from the big-integer arithmetic that holds the GIL for seconds.
MAX_DIMENSION_SIZE = 2**31
MAX_OFFSET = 2**48  # 256 TiB: past any file the upload limit lets in

DTYPE_SIZES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


class HeaderError(ValueError):
    """The file is not a well-formed safetensors file (truncated, bad JSON, bad offsets)."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor's dtype, shape and absolute byte range in the file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        """Size of the tensor's data in bytes."""
        return self.end - self.start


@dataclass(frozen=True)
class SafetensorsHeader:
    """The parsed header: tensors in file order, the free-form metadata and the data offset."""

    tensors: dict[str, TensorEntry]
    metadata: dict[str, Any]
    data_start: int
    file_size: int


def read_header(path: Path) -> SafetensorsHeader:
    """Parse and check the header of `path`; raise HeaderError naming what is wrong."""
    file_size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise HeaderError(f"{path.name} is {file_size} bytes, too short for a header")
        length = int.from_bytes(prefix, "little")
        if length > MAX_HEADER_BYTES:
            raise HeaderError(
                f"{path.name} declares a {length}-byte header; an adapter's header is at most "
                f"{MAX_HEADER_BYTES} bytes"
            )
        if 8 + length > file_size:
            raise HeaderError(
                f"{path.name} declares a {length}-byte header but the file has {file_size} bytes"
            )
        raw = f.read(length)
    try:
        parsed = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HeaderError(f"{path.name} has a header that is not valid JSON: {exc}") from exc
    except (RecursionError, ValueError) as exc:  # nesting too deep; an integer too long
        raise HeaderError(
            f"{path.name} has a header nested too deep or with too long a number"
        ) from exc
    if not isinstance(parsed, dict):
        raise HeaderError(f"{path.name} has a header that is not a JSON object")
    metadata = parsed.pop("__metadata__", None) or {}
    if len(parsed) > MAX_TENSORS:
        raise HeaderError(
            f"{path.name} lists {len(parsed)} tensors; an adapter has at most {MAX_TENSORS}"
        )
    data_start = 8 + length
    entries = [_parse_entry(path.name, name, spec, data_start) for name, spec in parsed.items()]
    entries.sort(key=lambda e: e.start)
    _check_layout(path.name, entries, data_start, file_size)
    return SafetensorsHeader(
        tensors={e.name: e for e in entries},
        metadata=metadata if isinstance(metadata, dict) else {},
        data_start=data_start,
        file_size=file_size,
    )


def _parse_entry(file_name: str, name: str, spec: Any, data_start: int) -> TensorEntry:
    """Turn one header record into a TensorEntry, checking its types and byte count."""
    where = f"{file_name}: tensor {name!r}"
    if not isinstance(spec, dict):
        raise HeaderError(f"{where} has no dtype/shape/data_offsets record")
    dtype, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if dtype not in DTYPE_SIZES:
        raise HeaderError(f"{where} has unknown dtype {dtype!r}")
    if not _is_int_list(shape) or not _is_int_list(offsets) or len(offsets) != 2:
        raise HeaderError(f"{where} has a malformed shape or data_offsets")
    if len(shape) > MAX_DIMENSIONS:
        raise HeaderError(
            f"{where} has {len(shape)} dimensions; at most {MAX_DIMENSIONS} are allowed"
        )
    if any(size > MAX_DIMENSION_SIZE for size in shape):
        raise HeaderError(f"{where} has a dimension above {MAX_DIMENSION_SIZE}")
    if any(offset > MAX_OFFSET for offset in offsets):
        raise HeaderError(f"{where} has a data offset above {MAX_OFFSET}")
    begin, end = offsets
    expected = math.prod(shape) * DTYPE_SIZES[dtype]
    if end - begin != expected:
        raise HeaderError(
            f"{where} has {end - begin} bytes of data but shape {shape} of {dtype} needs {expected}"
        )
    return TensorEntry(name, dtype, tuple(shape), data_start + begin, data_start + end)


def _is_int_list(value: Any) -> TypeGuard[list[int]]:
    """True for a list of non-negative ints (JSON booleans excluded)."""
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    )


def _check_layout(file_name: str, entries: list[TensorEntry], data_start: int, size: int) -> None:
    """Tensors must tile the data region exactly: no gaps, no overlaps, nothing cut off."""
    position = data_start
    for entry in entries:
        if entry.start != position:
            raise HeaderError(
                f"{file_name}: tensor {entry.name!r} starts at byte {entry.start}, "
                f"expected {position} (overlapping or missing data)"
            )
        position = entry.end
    if position != size:
        raise HeaderError(
            f"{file_name}: header describes {position} bytes but the file has {size} "
            "(truncated or trailing data)"
        )
