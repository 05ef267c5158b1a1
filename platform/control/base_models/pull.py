"""`loraplex base-models pull`: copy a pushed model from the object store into a folder.

Resumable and idempotent: each file lands under a temporary name and is renamed into place
once its sha256 matched, so a final name never holds a partial file; a rerun keeps every
file already right. A marker written last records which manifest the folder is a complete
copy of, so the next start checks sizes instead of hashing gigabytes. Two pulls into the same
folder (two pods starting on one node) take turns on a lock file beside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from loraplex.adapters.errors import ObjectMissing
from loraplex.adapters.store.base import ObjectStore, sha256_of_file
from loraplex.control.base_models.manifest import (
    Manifest,
    ManifestError,
    ManifestFile,
    check_model_name,
    decode_manifest,
    file_key,
    manifest_key,
    manifest_sha256,
)
from loraplex.control.base_models.pull_plan import (
    LocalFile,
    Marker,
    is_complete_copy,
    plan_pull,
    to_hash,
)
from loraplex.control.base_models.store_objects import (
    count_files,
    describe_store,
    format_bytes,
    read_manifest_bytes,
)

MARKER_NAME = ".loraplex-pulled.json"
# Temporary names of files being fetched; the local store and boto3 add suffixes of their own.
PARTIAL_MARK = "loraplex-partial-"
LOCK_POLL_S = 0.5


class ModelNotInStore(ManifestError):
    """No complete copy of the model is in the object store."""


@dataclass(frozen=True)
class PullReport:
    """What a pull did, for the operator reading an init container's log."""

    name: str
    dest: Path
    is_skipped: bool
    fetched_files: int
    fetched_bytes: int
    kept_files: int
    kept_bytes: int
    extra: tuple[str, ...]
    seconds: float

    def summary(self) -> str:
        """One line: fetched and kept, in files and bytes, and how long it took."""
        if self.is_skipped:
            return (
                f"{self.name}: {self.dest} already holds a complete copy "
                f"({count_files(self.kept_files)}, {format_bytes(self.kept_bytes)}; marker and "
                f"sizes checked): fetched 0 files, 0 bytes in {self.seconds:.2f} s"
            )
        return (
            f"{self.name}: fetched {count_files(self.fetched_files)} "
            f"({format_bytes(self.fetched_bytes)}), kept {count_files(self.kept_files)} "
            f"({format_bytes(self.kept_bytes)}) into {self.dest} "
            f"in {self.seconds:.2f} s"
        )


def pull_model(
    store: ObjectStore,
    name: str,
    dest: Path,
    *,
    verify: bool = False,
    lock_timeout_s: float = 3600.0,
    say: Callable[[str], None] = print,
) -> PullReport:
    """Make `dest` a verified copy of model `name` from `store`, fetching only what is missing.

    `verify` hashes every file even when the marker says the copy is complete.
    """
    check_model_name(name)
    started = time.monotonic()
    dest = dest.absolute()
    data = _manifest_bytes(store, name)
    manifest, sha256 = decode_manifest(data, name), manifest_sha256(data)
    if not verify and _holds_copy(dest, manifest, sha256):
        # Checked before the lock too: a complete copy on a read-only volume needs no writes.
        return _skipped(name, dest, manifest, started)
    with pull_lock(dest, lock_timeout_s, say):
        dest.mkdir(exist_ok=True)
        if not verify and _holds_copy(dest, manifest, sha256):  # another pull just made it
            return _skipped(name, dest, manifest, started)
        local = _local_files(dest)
        plan = plan_pull(manifest, _with_hashes(dest, manifest, local, say))
        (dest / MARKER_NAME).unlink(missing_ok=True)  # no longer a complete copy
        _remove_partials(dest)
        for entry in plan.fetch:
            _fetch(store, name, dest, entry, say)
        for path in plan.extra:
            say(f"  note: {path} is in {dest} but not in the manifest; left as it is")
        _write_marker(dest, Marker(name, sha256))
    return PullReport(
        name, dest, False, len(plan.fetch), plan.bytes_to_fetch, len(plan.keep),
        plan.bytes_kept, plan.extra, time.monotonic() - started,
    )  # fmt: skip


def _holds_copy(dest: Path, manifest: Manifest, sha256: str) -> bool:
    """Whether `dest` is a complete copy by its marker and file sizes."""
    return dest.is_dir() and is_complete_copy(
        manifest, sha256, read_marker(dest), _local_files(dest)
    )


def _skipped(name: str, dest: Path, manifest: Manifest, started: float) -> PullReport:
    kept = manifest.total_bytes
    return PullReport(name, dest, True, 0, 0, len(manifest.files), kept, (),
                      time.monotonic() - started)  # fmt: skip


@contextlib.contextmanager
def pull_lock(dest: Path, timeout_s: float, say: Callable[[str], None]) -> Iterator[None]:
    """Hold `.<dest name>.pull.lock` beside `dest`; the kernel frees it if the holder dies."""
    if not dest.name:
        raise ManifestError(f"{dest} cannot hold a model: name a folder for it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    path = dest.parent / f".{dest.name}.pull.lock"
    with path.open("a") as handle:
        deadline = time.monotonic() + timeout_s
        waiting = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ManifestError(
                        f"another pull into {dest} held {path} for {timeout_s:.0f} s"
                    ) from None
                if not waiting:
                    say(f"  waiting for another pull into {dest} to finish ({path})")
                    waiting = True
                time.sleep(LOCK_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_marker(dest: Path) -> Marker | None:
    """The marker a complete pull left in `dest`, or None (absent or unreadable)."""
    try:
        data = json.loads((dest / MARKER_NAME).read_text(encoding="utf-8"))
        return Marker(str(data["name"]), str(data["manifest_sha256"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _manifest_bytes(store: ObjectStore, name: str) -> bytes:
    """The stored manifest, or ModelNotInStore saying where it looked and what to do."""
    try:
        return read_manifest_bytes(store, manifest_key(name))
    except ObjectMissing:
        raise ModelNotInStore(
            f"base model {name!r} is not in the object store ({describe_store(store)}: no "
            f"{manifest_key(name)}); push it first: loraplex base-models push DIR --name {name}"
        ) from None


def _local_files(dest: Path) -> dict[str, LocalFile]:
    """Every visible file under `dest` by relative path, with its size."""
    found: dict[str, LocalFile] = {}
    for folder, dirnames, filenames in os.walk(dest):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            path = Path(folder) / name
            if not name.startswith(".") and path.is_file():
                found[path.relative_to(dest).as_posix()] = LocalFile(path.stat().st_size)
    return found


def _with_hashes(
    dest: Path, manifest: Manifest, local: dict[str, LocalFile], say: Callable[[str], None]
) -> dict[str, LocalFile]:
    """`local` with the sha256 of each file whose size is already right."""
    candidates = to_hash(manifest, local)
    if candidates:
        total = sum(f.size for f in candidates)
        say(
            f"  checking {count_files(len(candidates))} already in {dest} "
            f"({format_bytes(total)} to hash)"
        )
    hashed = dict(local)
    for entry in candidates:
        sha256, size = sha256_of_file(dest / entry.path)
        hashed[entry.path] = LocalFile(size, sha256)
    return hashed


def _fetch(
    store: ObjectStore, name: str, dest: Path, entry: ManifestFile, say: Callable[[str], None]
) -> None:
    """Download one file under a temporary name, verified and flushed, then rename it."""
    started = time.monotonic()
    target = dest / entry.path
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{PARTIAL_MARK}{uuid.uuid4().hex[:12]}-{target.name}")
    try:
        store.get_file(file_key(name, entry.path), temp, entry.sha256)
        with temp.open("rb") as written:
            os.fsync(written.fileno())  # on disk before the marker can vouch for it
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
    seconds = time.monotonic() - started
    say(f"  fetched {entry.path}: {format_bytes(entry.size)} in {seconds:.2f} s")


def _remove_partials(dest: Path) -> None:
    """Delete what an interrupted pull left under temporary names."""
    for path in dest.rglob(f"*{PARTIAL_MARK}*"):
        if path.is_file() and path.name.startswith("."):
            path.unlink(missing_ok=True)


def _write_marker(dest: Path, marker: Marker) -> None:
    """Record the complete copy, atomically and after every file is on disk."""
    temp = dest / f".{PARTIAL_MARK}{uuid.uuid4().hex[:12]}{MARKER_NAME}"
    body = {"name": marker.name, "manifest_sha256": marker.manifest_sha256}
    with temp.open("w", encoding="utf-8") as out:
        out.write(json.dumps(body, indent=2) + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, dest / MARKER_NAME)
    folder = os.open(dest, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
