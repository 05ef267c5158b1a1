"""`loraplex base-models push`: upload a model folder to the object store, manifest last.

While a push runs the model has no manifest (a previous one is removed first), so a pull
finds it missing rather than half there; files an earlier push left that the new manifest
does not list are deleted once it is written. A file the store already holds with the same
sha256 is not uploaded again, so pushing a model twice costs a read of it, not an upload.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loraplex.adapters.errors import ObjectMissing
from loraplex.adapters.store.base import ObjectStore, sha256_of_file
from loraplex.control.base_models.manifest import (
    Manifest,
    ManifestError,
    ManifestFile,
    check_model_name,
    encode_manifest,
    file_key,
    files_prefix,
    manifest_key,
    manifest_sha256,
)
from loraplex.control.base_models.model_folder import FolderFile, read_model_folder
from loraplex.control.base_models.store_objects import (
    count_files,
    describe_store,
    format_bytes,
    write_bytes,
)


@dataclass(frozen=True)
class PushReport:
    """What a push stored."""

    name: str
    files: int
    bytes: int
    uploaded_bytes: int
    hidden_left_out: tuple[str, ...]
    stale_deleted: int
    manifest_sha256: str
    where: str
    seconds: float

    def summary(self) -> str:
        """One line: how much went where, and how long it took."""
        return (
            f"{self.name}: pushed {count_files(self.files)} ({format_bytes(self.bytes)}, "
            f"{format_bytes(self.uploaded_bytes)} uploaded, the rest already stored) to "
            f"{self.where} in {self.seconds:.2f} s (manifest sha256 {self.manifest_sha256[:12]})"
        )


def push_model(
    store: ObjectStore, source: Path, name: str | None = None, say: Callable[[str], None] = print
) -> PushReport:
    """Upload every file of `source` as model `name` (default: the folder's name)."""
    started = time.monotonic()
    name = check_model_name(name or source.resolve().name)
    contents = read_model_folder(source)
    for hidden in contents.hidden:
        say(f"  left out hidden {hidden}")
    store.check()
    store.delete(manifest_key(name))
    entries, uploaded = [], 0
    for item in contents.files:
        entry, is_uploaded = _upload_unless_stored(store, name, item, say)
        entries.append(entry)
        uploaded += entry.size if is_uploaded else 0
    data = encode_manifest(Manifest(name, tuple(entries)))
    write_bytes(store, manifest_key(name), data)
    listed = {file_key(name, e.path) for e in entries}
    stale = [key for key in store.list_keys(files_prefix(name)) if key not in listed]
    for key in stale:
        store.delete(key)
    return PushReport(
        name, len(entries), contents.total_bytes, uploaded, contents.hidden, len(stale),
        manifest_sha256(data), describe_store(store), time.monotonic() - started,
    )  # fmt: skip


def _upload_unless_stored(
    store: ObjectStore, name: str, item: FolderFile, say: Callable[[str], None]
) -> tuple[ManifestFile, bool]:
    """The file's manifest entry, uploading it unless the store holds these exact bytes."""
    started = time.monotonic()
    key = file_key(name, item.path)
    sha256, size = sha256_of_file(item.source)
    entry = ManifestFile(item.path, size, sha256)
    try:
        stored = store.stat(key)
    except ObjectMissing:
        stored = None
    if stored is not None and (stored.size, stored.sha256) == (size, sha256):
        say(f"  unchanged {item.path}: {format_bytes(size)}")
        return entry, False
    stored = store.put_file(key, item.source)
    if (stored.size, stored.sha256) != (size, sha256):
        raise ManifestError(f"{item.path} changed while it was pushed; push again")
    say(f"  uploaded {item.path}: {format_bytes(size)} in {time.monotonic() - started:.2f} s")
    return entry, True
