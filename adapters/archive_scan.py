"""Counts an archive's entries from its own records before an archive library parses it.

Python's archive readers trust the archive's bookkeeping: `zipfile.ZipFile` builds a
`ZipInfo` (~535 bytes) for every record of the central directory before a caller can count
them, so a small zip declaring millions of entries costs gigabytes; `tarfile` reads a GNU
long-name or pax record into memory whole, however large its header says it is. These scans
read only the records (the zip's end-of-directory record, the tar's 512-byte headers) and
refuse an archive an adapter could never be before either library sees it.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import IO

from loraplex.adapters.errors import AdapterRejected, Rejection

# An adapter archive holds at most three files and a wrapping folder (plus tar's pax records);
# anything with more entries is refused before more of it is read.
MAX_MEMBERS = 16
# A central directory record is 46 bytes plus its name, extra field and comment; names of an
# adapter's files are short. 16 records of 4 kB each is generous.
MAX_ZIP_DIRECTORY_BYTES = MAX_MEMBERS * 4096
# A pax or GNU long-name record holds a path and a few attributes: a few hundred bytes.
MAX_TAR_METADATA_BYTES = 64 * 1024
TAR_BLOCK = 512
TAR_METADATA_TYPES = frozenset(b"LKxgX")

_EOCD = struct.Struct("<4s4H2LH")  # end of central directory record
_EOCD_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")
_ZIP64_EOCD_SIGNATURE = b"PK\x06\x06"
_MAX_COMMENT = 65535


def too_many_entries() -> AdapterRejected:
    """The refusal of an archive with more entries than an adapter has."""
    return AdapterRejected(Rejection.EXTRA_FILE, f"the archive has more than {MAX_MEMBERS} entries")


def check_zip_directory(path: Path) -> None:
    """Refuse a zip whose central directory holds more entries or bytes than an adapter's."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        tail_start = max(0, size - _EOCD.size - _MAX_COMMENT)
        handle.seek(tail_start)
        tail = handle.read()
        at = tail.rfind(_EOCD_SIGNATURE)
        if at < 0 or at + _EOCD.size > len(tail):
            raise AdapterRejected(Rejection.BAD_ARCHIVE, f"{path.name} is not a zip file")
        record = _EOCD.unpack_from(tail, at)
        entries, directory_bytes = record[4], record[5]
        if entries == 0xFFFF or directory_bytes == 0xFFFFFFFF:
            entries, directory_bytes = _zip64_counts(handle, tail_start + at, path.name)
    if entries > MAX_MEMBERS:
        raise too_many_entries()
    if directory_bytes > MAX_ZIP_DIRECTORY_BYTES:
        raise AdapterRejected(
            Rejection.BAD_ARCHIVE,
            f"the archive's directory has {directory_bytes} bytes; an adapter's needs at most "
            f"{MAX_ZIP_DIRECTORY_BYTES}",
        )


def _zip64_counts(handle: IO[bytes], eocd_at: int, name: str) -> tuple[int, int]:
    """(entries, directory bytes) from the zip64 end record the locator points at."""
    if eocd_at < _ZIP64_LOCATOR.size:
        raise AdapterRejected(Rejection.BAD_ARCHIVE, f"{name} has a damaged zip64 directory")
    handle.seek(eocd_at - _ZIP64_LOCATOR.size)
    signature, _disk, record_at, _disks = _ZIP64_LOCATOR.unpack(handle.read(_ZIP64_LOCATOR.size))
    if signature != _ZIP64_LOCATOR_SIGNATURE:
        raise AdapterRejected(Rejection.BAD_ARCHIVE, f"{name} has a damaged zip64 directory")
    handle.seek(record_at)
    raw = handle.read(_ZIP64_EOCD.size)
    if len(raw) < _ZIP64_EOCD.size or raw[:4] != _ZIP64_EOCD_SIGNATURE:
        raise AdapterRejected(Rejection.BAD_ARCHIVE, f"{name} has a damaged zip64 directory")
    record = _ZIP64_EOCD.unpack(raw)
    return record[7], record[8]


def check_tar_headers(stream: IO[bytes]) -> None:
    """Walk a tar stream's headers, refusing too many entries or an oversized metadata record.

    `stream` is the (decompressed, length-capped) tar byte stream; file data is skipped, not
    kept. Checks end at the first all-zero block, as tar readers do.
    """
    members = metadata = 0
    while True:
        header = stream.read(TAR_BLOCK)
        if len(header) < TAR_BLOCK or not header.strip(b"\0"):
            return  # the end (or a truncation, which tarfile reports itself)
        size = _tar_size(header)
        if header[156] in TAR_METADATA_TYPES:
            metadata += 1
            if size > MAX_TAR_METADATA_BYTES:
                raise AdapterRejected(
                    Rejection.TOO_LARGE,
                    f"the archive has a {size}-byte name or pax record; at most "
                    f"{MAX_TAR_METADATA_BYTES} bytes are allowed",
                )
        else:
            members += 1
        if members > MAX_MEMBERS or metadata > 2 * MAX_MEMBERS:
            raise too_many_entries()
        _skip(stream, -(-size // TAR_BLOCK) * TAR_BLOCK)


def _tar_size(header: bytes) -> int:
    """The size field of a tar header: octal digits, or base-256 when its top bit is set."""
    field = header[124:136]
    if field[0] & 0x80:
        return int.from_bytes(field[1:], "big")
    digits = field.rstrip(b"\0 ").lstrip(b" ") or b"0"
    try:
        return int(digits, 8)
    except ValueError:
        raise AdapterRejected(Rejection.BAD_ARCHIVE, "the archive has a damaged header") from None


def _skip(stream: IO[bytes], count: int) -> None:
    """Read and drop `count` bytes (the stream may not be seekable: it can be gunzipped)."""
    while count > 0:
        chunk = stream.read(min(count, 1024 * 1024))
        if not chunk:
            return
        count -= len(chunk)
