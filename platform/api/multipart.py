"""Streams a multipart/form-data request body to files on disk, never holding it in memory.

Litestar's own multipart support reads the whole body first; an adapter upload can be
hundreds of MB, so file parts go through python-multipart's incremental parser straight to
disk, and the byte cap is enforced as bytes arrive (a lying Content-Length changes nothing).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from litestar import Request
from python_multipart import MultipartParser
from python_multipart.multipart import parse_options_header

from loraplex.errors import InvalidInput, PayloadTooLarge

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
MAX_FIELD_BYTES = 64 * 1024


class _PartWriter:
    """Callbacks for MultipartParser: one file per part, fields kept as short strings."""

    def __init__(self, dest: Path, max_bytes: int):
        self.dest, self.max_bytes = dest, max_bytes
        self.files: list[Path] = []
        self.fields: dict[str, str] = {}
        self._written = 0
        self._header_name = b""
        self._headers: dict[bytes, bytes] = {}
        self._out: IO[bytes] | None = None
        self._field: tuple[str, bytearray] | None = None

    def callbacks(self) -> dict[str, Any]:
        return {
            "on_part_begin": self._begin,
            "on_header_field": self._header_field,
            "on_header_value": self._header_value,
            "on_headers_finished": self._headers_done,
            "on_part_data": self._data,
            "on_part_end": self._end,
        }

    def _begin(self) -> None:
        self._headers, self._header_name = {}, b""

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name = data[start:end].lower()

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._headers[self._header_name] = (
            self._headers.get(self._header_name, b"") + data[start:end]
        )

    def _headers_done(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        filename = options.get(b"filename")
        if filename is None:
            self._field = (name, bytearray())
            return
        base = Path(filename.decode("utf-8", "replace").replace("\\", "/")).name
        if not SAFE_NAME.match(base):
            raise InvalidInput(f"file name {base!r} is not allowed", param=name or "file")
        target = self.dest / base
        if target.exists():
            raise InvalidInput(f"file {base!r} was sent twice", param=name or "file")
        self.files.append(target)
        self._out = target.open("wb")

    def _data(self, data: bytes, start: int, end: int) -> None:
        self._written += end - start
        if self._written > self.max_bytes:
            raise PayloadTooLarge(f"upload is larger than the {self.max_bytes} byte limit")
        if self._out is not None:
            self._out.write(data[start:end])
        elif self._field is not None:
            self._field[1].extend(data[start:end])
            if len(self._field[1]) > MAX_FIELD_BYTES:
                raise PayloadTooLarge(f"form field {self._field[0]!r} is too long")

    def _end(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        elif self._field is not None:
            self.fields[self._field[0]] = self._field[1].decode("utf-8", "replace")
            self._field = None

    def close(self) -> None:
        if self._out is not None:
            self._out.close()


async def save_multipart(
    request: Request[Any, Any, Any], dest: Path, max_bytes: int
) -> tuple[list[Path], dict[str, str]]:
    """Write each file part of the body under `dest`; return the files and the plain fields."""
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise InvalidInput("send the adapter as multipart/form-data", param="content-type")
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > max_bytes + MAX_FIELD_BYTES:
        raise PayloadTooLarge(f"upload is larger than the {max_bytes} byte limit")
    writer = _PartWriter(dest, max_bytes)
    parser = MultipartParser(boundary, writer.callbacks())
    try:
        async for chunk in request.stream():
            if chunk:
                parser.write(chunk)
        parser.finalize()
    finally:
        writer.close()
    if not writer.files:
        raise InvalidInput("no file in the upload", param="file")
    return writer.files, writer.fields


@contextmanager
def upload_workdir(data_dir: Path) -> Iterator[Path]:
    """A fresh folder under `data_dir/uploads` for one upload, removed afterwards (same
    filesystem as the node's other data, so finished files move instead of copying)."""
    uploads = data_dir / "uploads"
    uploads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=uploads) as workdir:
        yield Path(workdir)
