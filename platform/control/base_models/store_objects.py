"""The few object-store reads and writes push and pull share, and how they name the store."""

from __future__ import annotations

import tempfile
from pathlib import Path

from loraplex.adapters.store import LocalStore, S3Store
from loraplex.adapters.store.base import ObjectStore
from loraplex.control.base_models.manifest import MAX_MANIFEST_BYTES, ManifestError


def read_manifest_bytes(store: ObjectStore, key: str) -> bytes:
    """A manifest's bytes, refusing one over MAX_MANIFEST_BYTES; ObjectMissing if absent."""
    data = bytearray()
    chunks = store.open_chunks(key)
    try:
        for chunk in chunks:
            data += chunk
            if len(data) > MAX_MANIFEST_BYTES:
                raise ManifestError(f"{key} is over {MAX_MANIFEST_BYTES} bytes")
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return bytes(data)


def write_bytes(store: ObjectStore, key: str, data: bytes) -> None:
    """Store `data` under `key` (stores take files: it goes through a temporary one)."""
    with tempfile.TemporaryDirectory(prefix="loraplex-manifest-") as folder:
        path = Path(folder) / "manifest.json"
        path.write_bytes(data)
        store.put_file(key, path)


def describe_store(store: ObjectStore) -> str:
    """Where the store keeps objects, for messages: its bucket or its folder."""
    if isinstance(store, S3Store):
        return f"S3 bucket {store.bucket!r}"
    if isinstance(store, LocalStore):
        return f"local store {store.root}"
    return type(store).__name__


def format_bytes(count: int) -> str:
    """A size as people read it: 512 B, 12.3 MB, 16.1 GB (powers of 1000, as disks say)."""
    size = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def count_files(count: int) -> str:
    """`1 file`, `3 files`."""
    return f"{count} file" if count == 1 else f"{count} files"
