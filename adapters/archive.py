"""Turns an upload already on disk (two files or one archive) into a clean adapter directory.

Archive contents are hostile until proven otherwise: names may climb out of the directory,
members may be links or devices, and sizes in headers may lie. Nothing is extracted by the
archive libraries' own extract functions; each allowed member is copied by hand while its
bytes are counted against the cap.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import io
import os
import re
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from loraplex.adapters.archive_scan import (
    MAX_MEMBERS,
    check_tar_headers,
    check_zip_directory,
    too_many_entries,
)
from loraplex.adapters.errors import AdapterRejected, Rejection
from loraplex.adapters.layout import canonical_file_name, require_files

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
CHUNK_BYTES = 1024 * 1024
# Headers, padding and end-of-archive blocks of a legitimate tar stay far below this.
TAR_OVERHEAD_BYTES = 1024 * 1024

MemberKind = Literal["file", "dir", "link", "special"]


@dataclass(frozen=True)
class _Member:
    """An archive entry reduced to what the checks need."""

    name: str
    kind: MemberKind
    open: Callable[[], IO[bytes]]


@dataclass
class _Unpacked:
    """Running state of one unpack: bytes written, files kept, folders seen."""

    max_bytes: int
    written: int = 0
    files: set[str] = field(default_factory=set)
    file_folders: set[tuple[str, ...]] = field(default_factory=set)
    dirs: set[tuple[str, ...]] = field(default_factory=set)


def is_archive_name(name: str) -> bool:
    """True when the upload's file name says it is an archive."""
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def unpack_upload(sources: list[Path], dest: Path, max_bytes: int) -> Path:
    """Fill the new directory `dest` with the adapter files of `sources`, or raise AdapterRejected.

    `sources` are either the loose files (each saved under the client's own file name) or a
    single archive. On any refusal `dest` is removed again.
    """
    if dest.exists() and any(dest.iterdir()):
        raise ValueError(f"{dest} is not empty")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        state = _Unpacked(max_bytes)
        if len(sources) == 1 and is_archive_name(sources[0].name):
            _unpack_archive(sources[0], dest, state)
        else:
            _copy_loose_files(sources, dest, state)
        require_files(state.files)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest


def _copy_loose_files(sources: list[Path], dest: Path, state: _Unpacked) -> None:
    """Link (or copy) each allowed file into `dest` under its canonical name."""
    for source in sources:
        name = canonical_file_name(source.name)
        if name in state.files:
            raise AdapterRejected(Rejection.EXTRA_FILE, f"{name} was uploaded twice")
        state.written += source.stat().st_size
        if state.written > state.max_bytes:
            raise AdapterRejected(
                Rejection.TOO_LARGE, f"the upload is over the {state.max_bytes}-byte limit"
            )
        try:
            # A hard link moves no bytes; uploads and dest usually share a filesystem.
            os.link(source, dest / name)
        except OSError:
            shutil.copyfile(source, dest / name)
        state.files.add(name)


def _unpack_archive(archive: Path, dest: Path, state: _Unpacked) -> None:
    """Extract the allowed members of a tar (optionally gzipped) or zip archive."""
    try:
        if archive.name.lower().endswith(".zip"):
            check_zip_directory(archive)
            with zipfile.ZipFile(archive) as zf:
                _extract_members(_zip_members(zf), dest, state)
        else:
            with archive.open("rb") as raw, _tar_stream(raw, state.max_bytes) as stream:
                check_tar_headers(stream)
            with (
                archive.open("rb") as raw,
                _tar_stream(raw, state.max_bytes) as stream,
                tarfile.open(fileobj=stream, mode="r|") as tf,
            ):
                _extract_members(_tar_members(tf), dest, state)
    except (tarfile.TarError, zipfile.BadZipFile, gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise AdapterRejected(Rejection.BAD_ARCHIVE, f"{archive.name} is damaged: {exc}") from exc
    except (NotImplementedError, RuntimeError) as exc:  # zip: encrypted or unknown compression
        raise AdapterRejected(
            Rejection.BAD_ARCHIVE, f"{archive.name} cannot be read: {exc}"
        ) from exc
    _check_folders(state)


@contextlib.contextmanager
def _tar_stream(raw: IO[bytes], max_bytes: int) -> Iterator[IO[bytes]]:
    """The tar byte stream, gunzipped if the magic bytes say so, capped in length.

    The cap applies to decompressed bytes: a small .tar.gz can inflate to terabytes of
    headers and padding that no member size ever mentions.
    """
    is_gzip = raw.read(2) == b"\x1f\x8b"
    raw.seek(0)
    limit = max_bytes + TAR_OVERHEAD_BYTES
    if is_gzip:
        with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
            yield io.BufferedReader(_CappedReader(unzipped, limit))
    else:
        yield io.BufferedReader(_CappedReader(raw, limit))


class _Readable(Protocol):
    """Anything with a binary `read`."""

    def read(self, size: int = -1, /) -> bytes:
        """Read up to `size` bytes."""
        ...


class _CappedReader(io.RawIOBase):
    """A read-only stream that refuses to hand out more than `limit` bytes in total."""

    def __init__(self, inner: _Readable, limit: int) -> None:
        super().__init__()
        self._inner = inner
        self._left = limit
        self._limit = limit

    def readable(self) -> bool:
        """Always readable."""
        return True

    def readinto(self, buffer: Any) -> int:
        """Fill `buffer` from the inner stream, raising too_large once the limit is passed."""
        data = self._inner.read(len(buffer))
        self._left -= len(data)
        if self._left < 0:
            raise AdapterRejected(
                Rejection.TOO_LARGE, f"the archive unpacks to more than {self._limit} bytes"
            )
        buffer[: len(data)] = data
        return len(data)


def _tar_members(tf: tarfile.TarFile) -> Iterator[_Member]:
    """Yield tar entries in stream order; each must be opened before the next is read."""
    for count, info in enumerate(tf, start=1):
        _check_member_count(count)
        yield _Member(info.name, _tar_kind(info), _tar_opener(tf, info))


def _tar_opener(tf: tarfile.TarFile, info: tarfile.TarInfo) -> Callable[[], IO[bytes]]:
    """A function opening the member's data (only called for regular files)."""

    def open_member() -> IO[bytes]:
        handle = tf.extractfile(info)
        if handle is None:  # pragma: no cover - regular files always have data
            raise AdapterRejected(Rejection.BAD_ARCHIVE, f"{info.name} has no data")
        return handle

    return open_member


def _tar_kind(info: tarfile.TarInfo) -> MemberKind:
    """Classify a tar entry; sparse files count as special."""
    if info.issym() or info.islnk():
        return "link"
    if info.isdir():
        return "dir"
    if info.isreg() and not info.issparse():
        return "file"
    return "special"


def _zip_members(zf: zipfile.ZipFile) -> Iterator[_Member]:
    """Yield zip entries from the central directory."""
    infos = zf.infolist()
    _check_member_count(len(infos))
    for info in infos:
        if info.flag_bits & 0x1:
            raise AdapterRejected(Rejection.BAD_ARCHIVE, f"{info.filename} is encrypted")
        yield _Member(info.filename, _zip_kind(info), functools.partial(zf.open, info))


def _zip_kind(info: zipfile.ZipInfo) -> MemberKind:
    """Classify a zip entry from the Unix mode its creator stored (if any)."""
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "link"
    if info.is_dir():
        return "dir"
    if stat.S_IFMT(mode) in (0, stat.S_IFREG):
        return "file"
    return "special"


def _check_member_count(count: int) -> None:
    """Refuse archives with more entries than an adapter can have."""
    if count > MAX_MEMBERS:
        raise too_many_entries()


def _extract_members(members: Iterator[_Member], dest: Path, state: _Unpacked) -> None:
    """Check every entry and copy the allowed files into `dest`."""
    for member in members:
        parts = _safe_parts(member.name)
        if member.kind == "link":
            raise AdapterRejected(Rejection.LINK_IN_ARCHIVE, f"{member.name} is a link")
        if member.kind == "special":
            raise AdapterRejected(
                Rejection.SPECIAL_FILE, f"{member.name} is not a regular file or folder"
            )
        if member.kind == "dir":
            if len(parts) > 1:
                raise AdapterRejected(Rejection.EXTRA_FILE, f"nested folder {member.name}")
            state.dirs.update([tuple(parts)] if parts else [])
            continue
        if not parts or len(parts) > 2:
            raise AdapterRejected(Rejection.EXTRA_FILE, f"unexpected entry {member.name!r}")
        name = canonical_file_name(parts[-1])
        if name in state.files:
            raise AdapterRejected(Rejection.EXTRA_FILE, f"{name} appears twice in the archive")
        with member.open() as source:
            _copy_capped(source, dest / name, state)
        state.files.add(name)
        state.file_folders.add(tuple(parts[:-1]))


def _safe_parts(name: str) -> list[str]:
    """Split an entry name into path parts, refusing absolute paths and `..`."""
    normal = name.replace("\\", "/")
    if "\x00" in normal or normal.startswith("/") or re.match(r"^[A-Za-z]:", normal):
        raise AdapterRejected(Rejection.PATH_TRAVERSAL, f"{name!r} is an absolute path")
    parts = [part for part in normal.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise AdapterRejected(Rejection.PATH_TRAVERSAL, f"{name!r} climbs out with '..'")
    return parts


def _copy_capped(source: IO[bytes], target: Path, state: _Unpacked) -> None:
    """Copy a member's bytes, counting each chunk: header sizes are not trusted."""
    with target.open("xb") as out:
        while chunk := source.read(CHUNK_BYTES):
            state.written += len(chunk)
            if state.written > state.max_bytes:
                raise AdapterRejected(
                    Rejection.TOO_LARGE,
                    f"the archive unpacks to more than {state.max_bytes} bytes "
                    f"(stopped in {target.name})",
                )
            out.write(chunk)


def _check_folders(state: _Unpacked) -> None:
    """Files may sit at the top or inside one wrapping folder, never spread over several."""
    folders = state.file_folders | state.dirs
    if len(folders - {()}) > 1 or (len(folders) > 1 and () in state.file_folders):
        listed = ", ".join("/".join(f) or "." for f in sorted(folders))
        raise AdapterRejected(
            Rejection.EXTRA_FILE, f"files are spread over several folders ({listed})"
        )
