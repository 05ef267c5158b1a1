"""Streams a multipart/form-data request body to files on disk, never holding it in memory.

Litestar's own multipart support reads the whole body first; an adapter upload can be
hundreds of MB, so file parts go through python-multipart's incremental parser straight to
disk, and the byte cap is enforced as bytes arrive (a lying Content-Length changes nothing).

An upload must also keep moving, or it is refused (408 `upload_too_slow`) and frees its
upload place (`upload_slots.py`): no byte for `UPLOAD_IDLE_S`, or, once `UPLOAD_GRACE_S` have
passed, less than `UPLOAD_MIN_RATE` bytes a second on average. Without it a tenant's uploads
trickling a few bytes a second held their places for as long as the tenant liked. The rate
is far below any real link (a 512 MB adapter at 16 KiB/s takes 9 hours).
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from litestar import Request
from litestar.exceptions import InternalServerException
from python_multipart import MultipartParser
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import parse_options_header

from loraplex.api.deps import services_of
from loraplex.errors import ClientGone, InvalidInput, LoraplexError, PayloadTooLarge

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
MAX_FIELD_BYTES = 64 * 1024
# An upload is a few parts (two adapter files, or one archive or training file, and a field
# or two): each part is a round of the parser's Python callbacks on the event loop.
MAX_PARTS = 32
UPLOAD_IDLE_S = 30.0  # no byte for this long: refused
UPLOAD_GRACE_S = 60.0  # then, on average at least
UPLOAD_MIN_RATE = 16 * 1024  # bytes a second


class UploadTooSlow(LoraplexError):
    """The upload stalled, or came slower than any real client sends."""

    status_code = 408
    code = "upload_too_slow"


async def moving_chunks(
    chunks: AsyncIterator[bytes], clock: Callable[[], float] = time.monotonic
) -> AsyncIterator[bytes]:
    """`chunks`, refused with UploadTooSlow when they stall or trickle (see the module)."""
    started, received = clock(), 0
    while True:
        try:
            chunk = await asyncio.wait_for(anext(chunks), UPLOAD_IDLE_S)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise UploadTooSlow(
                f"no byte of the upload came for {UPLOAD_IDLE_S:.0f} s; it was dropped"
            ) from None
        received += len(chunk)
        elapsed = clock() - started
        if elapsed > UPLOAD_GRACE_S and received < UPLOAD_MIN_RATE * elapsed:
            raise UploadTooSlow(
                f"the upload came at {received / elapsed:.0f} bytes/s; at least "
                f"{UPLOAD_MIN_RATE} bytes/s are needed after the first {UPLOAD_GRACE_S:.0f} s"
            )
        yield chunk


class _PartWriter:
    """Callbacks for MultipartParser: one file per part, fields kept as short strings."""

    def __init__(self, dest: Path, max_bytes: int):
        self.dest, self.max_bytes = dest, max_bytes
        self.files: list[Path] = []
        self.fields: dict[str, str] = {}
        self._written = 0
        self._parts = 0
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
        self._parts += 1
        if self._parts > MAX_PARTS:
            raise InvalidInput(
                f"the multipart body has more than {MAX_PARTS} parts; an upload needs a few",
                param="file",
            )
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
    declared = int(length) if length and length.isascii() and length.isdigit() else 0
    if declared > max_bytes + MAX_FIELD_BYTES:
        raise PayloadTooLarge(f"upload is larger than the {max_bytes} byte limit")
    writer = _PartWriter(dest, max_bytes)
    parser = MultipartParser(boundary, writer.callbacks())
    slots = services_of(request.app).upload_slots
    try:
        with slots.hold(_uploader(request)):
            async for chunk in moving_chunks(request.stream()):
                if chunk:
                    parser.write(chunk)
            parser.finalize()
    except InternalServerException as exc:  # Litestar's word for a client gone mid-body
        raise ClientGone("the client closed the connection before the upload ended") from exc
    except MultipartParseError as exc:
        raise InvalidInput(
            "the multipart body is malformed (boundaries or part headers)", param="file"
        ) from exc
    finally:
        writer.close()
    if not writer.files:
        raise InvalidInput("no file in the upload", param="file")
    return writer.files, writer.fields


def _uploader(request: Request[Any, Any, Any]) -> str:
    """Whose upload this is: the caller's tenant, the tenant in the path, or the address."""
    tenant = getattr(request.scope.get("user"), "tenant_id", None)
    tenant = tenant or request.path_params.get("tenant_id")
    return str(tenant or (request.client.host if request.client else "unknown"))


@contextmanager
def upload_workdir(data_dir: Path) -> Iterator[Path]:
    """A fresh folder under `data_dir/uploads` for one upload, removed afterwards (same
    filesystem as the node's other data, so finished files move instead of copying)."""
    uploads = data_dir / "uploads"
    uploads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=uploads) as workdir:
        yield Path(workdir)
