"""What a pull must fetch, given the model's manifest and what the destination folder holds.

Pure: the caller reads the folder (sizes always, sha256 only where `to_hash` says) and
applies the plan. The order of work is what keeps a start cheap: a folder whose marker names
this manifest and whose files all have their sizes is complete without reading a byte of
them; otherwise only files of the right size are hashed, and only those that match are kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from loraplex.control.base_models.manifest import Manifest, ManifestFile


@dataclass(frozen=True)
class LocalFile:
    """What the destination holds at one path: its size, and its sha256 once hashed."""

    size: int
    sha256: str | None = None


@dataclass(frozen=True)
class Marker:
    """Written into the destination after a complete pull: which manifest it copied."""

    name: str
    manifest_sha256: str


@dataclass(frozen=True)
class PullPlan:
    """The files to fetch from the store, those already right, and those no manifest lists."""

    fetch: tuple[ManifestFile, ...]
    keep: tuple[ManifestFile, ...]
    extra: tuple[str, ...]

    @property
    def bytes_to_fetch(self) -> int:
        """How much the fetches download."""
        return sum(f.size for f in self.fetch)

    @property
    def bytes_kept(self) -> int:
        """How much is already in place."""
        return sum(f.size for f in self.keep)


def is_complete_copy(
    manifest: Manifest,
    manifest_sha256: str,
    marker: Marker | None,
    local: Mapping[str, LocalFile],
) -> bool:
    """Whether the folder already holds this manifest's copy: marker and every size agree."""
    if marker is None or marker != Marker(manifest.name, manifest_sha256):
        return False
    return all(_size_matches(f, local) for f in manifest.files)


def to_hash(manifest: Manifest, local: Mapping[str, LocalFile]) -> list[ManifestFile]:
    """The files whose size is right: only their sha256 can say whether to keep them."""
    return [f for f in manifest.files if _size_matches(f, local)]


def plan_pull(manifest: Manifest, local: Mapping[str, LocalFile]) -> PullPlan:
    """Keep each file whose size and sha256 match the manifest; fetch every other."""
    keep: list[ManifestFile] = []
    fetch: list[ManifestFile] = []
    for entry in manifest.files:
        found = local.get(entry.path)
        is_right = found is not None and (found.size, found.sha256) == (entry.size, entry.sha256)
        (keep if is_right else fetch).append(entry)
    listed = {f.path for f in manifest.files}
    extra = tuple(sorted(path for path in local if path not in listed))
    return PullPlan(fetch=tuple(fetch), keep=tuple(keep), extra=extra)


def _size_matches(entry: ManifestFile, local: Mapping[str, LocalFile]) -> bool:
    found = local.get(entry.path)
    return found is not None and found.size == entry.size
