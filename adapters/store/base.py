"""The object-store interface, key rules and the hashing helpers both implementations share."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

from loraplex.adapters.errors import ObjectCorrupt

CHUNK_BYTES = 1024 * 1024
MAX_KEY_LENGTH = 1024
# Parts may not start with a dot: no `.`/`..`, and room for the local store's own dot-folders.
KEY_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=+-]*")


@dataclass(frozen=True)
class StoredObject:
    """An object as stored: its key, size and the sha256 of its bytes."""

    key: str
    size: int
    sha256: str


@runtime_checkable
class ObjectStore(Protocol):
    """Where adapter files live. Methods block; async callers run them in a thread."""

    def put_file(self, key: str, path: Path) -> StoredObject:
        """Store the file at `path` under `key` (replacing any object there)."""
        ...

    def get_file(self, key: str, dest: Path, expected_sha256: str) -> None:
        """Download `key` to `dest`; on a sha256 mismatch remove `dest` and raise ObjectCorrupt."""
        ...

    def open_chunks(self, key: str) -> Iterator[bytes]:
        """The object's bytes in chunks; ObjectMissing is raised before the first chunk."""
        ...

    def stat(self, key: str) -> StoredObject:
        """Size and recorded sha256 of an object; raise ObjectMissing if absent."""
        ...

    def exists(self, key: str) -> bool:
        """Whether an object is stored under `key`."""
        ...

    def delete(self, key: str) -> None:
        """Remove an object; removing a missing one is not an error."""
        ...

    def delete_prefix(self, prefix: str) -> int:
        """Remove every object under `prefix` (which must end with '/'); return how many."""
        ...

    def list_keys(self, prefix: str) -> list[str]:
        """Sorted keys starting with `prefix` ('' lists everything)."""
        ...

    def presigned_url(self, key: str, expires_s: int) -> str | None:
        """A time-limited download URL, or None where the store has no URLs of its own."""
        ...

    def check(self) -> None:
        """Raise StoreUnavailable unless the store answers and can be written to."""
        ...


def validate_key(key: str) -> str:
    """Return `key` if it is a relative, slash-separated key of safe parts; else ValueError."""
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"object key must have 1 to {MAX_KEY_LENGTH} characters: {key!r}")
    if not all(KEY_PART.fullmatch(part) for part in key.split("/")):
        raise ValueError(f"invalid object key {key!r}")
    return key


def validate_prefix(prefix: str, *, allow_empty: bool) -> str:
    """A key prefix: '' (if allowed), or key parts optionally ending with '/'."""
    if prefix == "" and allow_empty:
        return prefix
    validate_key(prefix.removesuffix("/"))
    return prefix


def validate_delete_prefix(prefix: str) -> str:
    """Prefixes to delete must end with '/', so `v1/` never takes `v10/` along."""
    if not prefix.endswith("/"):
        raise ValueError(f"a prefix to delete must end with '/': {prefix!r}")
    return validate_prefix(prefix, allow_empty=False)


def sha256_of_file(path: Path) -> tuple[str, int]:
    """(sha256 hex, size) of a file, read in chunks."""
    with path.open("rb") as f:
        return copy_hashing(f, None)


def copy_hashing(source: BinaryIO, target: BinaryIO | None) -> tuple[str, int]:
    """Copy `source` to `target` (if any) in chunks; return (sha256 hex, bytes copied)."""
    digest = hashlib.sha256()
    size = 0
    while chunk := source.read(CHUNK_BYTES):
        digest.update(chunk)
        size += len(chunk)
        if target is not None:
            target.write(chunk)
    return digest.hexdigest(), size


def verify_download(key: str, dest: Path, expected_sha256: str) -> None:
    """Hash a downloaded file; remove it and raise ObjectCorrupt if it is not what was stored."""
    actual, _ = sha256_of_file(dest)
    if actual != expected_sha256:
        dest.unlink(missing_ok=True)
        raise ObjectCorrupt(corrupt_message(key, actual, expected_sha256))


def corrupt_message(key: str, actual: str, expected: str) -> str:
    """The ObjectCorrupt message: which object, and both hashes."""
    return f"object {key!r} has sha256 {actual}, but {expected} was recorded"
