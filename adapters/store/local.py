"""An object store in a local directory: the embedded default, and the store tests can read."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from loraplex.adapters.errors import ObjectCorrupt, ObjectMissing, StoreUnavailable
from loraplex.adapters.store.base import (
    CHUNK_BYTES,
    StoredObject,
    copy_hashing,
    corrupt_message,
    sha256_of_file,
    validate_delete_prefix,
    validate_key,
    validate_prefix,
)

# Partial writes live here until renamed into place; keys cannot start with a dot.
INCOMING_DIR = ".incoming"


class LocalStore:
    """Objects as files under `root`; a write becomes visible only once complete."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def put_file(self, key: str, path: Path) -> StoredObject:
        """Copy `path` to the key's file via a temp file and an atomic rename."""
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        with path.open("rb") as source, self._incoming() as (temp, out):
            sha256, size = copy_hashing(source, out)
            out.flush()
            os.fsync(out.fileno())
            os.replace(temp, target)
        return StoredObject(key, size, sha256)

    def get_file(self, key: str, dest: Path, expected_sha256: str) -> None:
        """Copy the object to `dest` and check its sha256."""
        source = self._existing_path(key)
        temp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.part")
        try:
            with source.open("rb") as src, temp.open("xb") as out:
                actual, _ = copy_hashing(src, out)
            if actual != expected_sha256:
                dest.unlink(missing_ok=True)
                raise ObjectCorrupt(corrupt_message(key, actual, expected_sha256))
            os.replace(temp, dest)
        finally:
            temp.unlink(missing_ok=True)

    def open_chunks(self, key: str) -> Iterator[bytes]:
        """Open the object now (so a missing one fails here) and yield it in chunks."""
        handle = self._existing_path(key).open("rb")
        return _read_chunks(handle)

    def stat(self, key: str) -> StoredObject:
        """Size and sha256 (computed: a local store keeps no metadata)."""
        sha256, size = sha256_of_file(self._existing_path(key))
        return StoredObject(key, size, sha256)

    def exists(self, key: str) -> bool:
        """Whether the key's file exists."""
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        """Remove the key's file and any folders it leaves empty."""
        path = self._path(key)
        path.unlink(missing_ok=True)
        self._prune_empty_dirs(path.parent)

    def delete_prefix(self, prefix: str) -> int:
        """Remove every object under `prefix`."""
        keys = self.list_keys(validate_delete_prefix(prefix))
        for key in keys:
            self.delete(key)
        return len(keys)

    def list_keys(self, prefix: str) -> list[str]:
        """Keys of the files under the root that start with `prefix`."""
        validate_prefix(prefix, allow_empty=True)
        # Walk only the deepest folder the prefix names, not the whole store.
        start = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        if not start.is_dir():
            return []
        keys = (p.relative_to(self.root).as_posix() for p in start.rglob("*") if p.is_file())
        return sorted(k for k in keys if k.startswith(prefix) and not k.startswith("."))

    def presigned_url(self, key: str, expires_s: int) -> str | None:
        """A local store has no URLs; the API streams the file itself."""
        return None

    def check(self) -> None:
        """The root must exist (it is created) and be writable."""
        try:
            (self.root / INCOMING_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(f"cannot create store directory {self.root}: {exc}") from exc
        if not os.access(self.root, os.W_OK):
            raise StoreUnavailable(f"store directory {self.root} is not writable")

    def _path(self, key: str) -> Path:
        """The file for `key`, refusing anything that would resolve outside the root."""
        path: Path = self.root / validate_key(key)
        # Key rules already forbid `..`; this also catches a symlinked folder inside the root.
        if not path.resolve().is_relative_to(self.root.resolve()):
            raise ValueError(f"object key {key!r} escapes the store root")
        return path

    def _existing_path(self, key: str) -> Path:
        """The key's file, or ObjectMissing."""
        path = self._path(key)
        if not path.is_file():
            raise ObjectMissing(f"no object {key!r} in {self.root}")
        return path

    @contextlib.contextmanager
    def _incoming(self) -> Iterator[tuple[Path, BinaryIO]]:
        """A fresh temp file on the store's filesystem, removed unless renamed into place."""
        folder = self.root / INCOMING_DIR
        folder.mkdir(parents=True, exist_ok=True)
        temp = folder / uuid.uuid4().hex
        try:
            with temp.open("xb") as out:
                yield temp, out
        finally:
            temp.unlink(missing_ok=True)

    def _prune_empty_dirs(self, folder: Path) -> None:
        """Remove empty folders from `folder` up to (not including) the root."""
        root = self.root.resolve()
        current = folder.resolve()
        while current != root and current.is_relative_to(root):
            try:
                current.rmdir()
            except OSError:  # not empty, or already gone
                return
            current = current.parent


def _read_chunks(handle: BinaryIO) -> Iterator[bytes]:
    """Yield a file's chunks and close it, also when the consumer stops early."""
    with handle:
        while chunk := handle.read(CHUNK_BYTES):
            yield chunk
