"""What a model folder on disk holds: the files a push uploads, checked before any upload."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from loraplex.control.base_models.manifest import (
    MAX_FILES,
    MAX_TOTAL_BYTES,
    ManifestError,
    check_relative_path,
)


@dataclass(frozen=True)
class FolderFile:
    """A regular file of the folder: where it is, its path relative to the folder, its size."""

    source: Path
    path: str
    size: int


@dataclass(frozen=True)
class FolderContents:
    """The files a push uploads, and the hidden entries it leaves out."""

    files: tuple[FolderFile, ...]
    hidden: tuple[str, ...]

    @property
    def total_bytes(self) -> int:
        """The size of all the files together."""
        return sum(f.size for f in self.files)


def read_model_folder(root: Path) -> FolderContents:
    """List every regular file under `root`, refusing what a model folder should not hold.

    Hidden entries (`.gitattributes`, a `.cache/` folder left by a download tool) are left out:
    object keys cannot start with a dot, and no loader reads them. A symlink is followed only
    to a file inside the folder; one that leads out, a symlinked folder, or a special file
    (FIFO, socket, device) is refused by name.
    """
    if not root.is_dir():
        raise ManifestError(f"{root} is not a folder")
    real_root = root.resolve()
    files: list[FolderFile] = []
    hidden: list[str] = []
    total = 0
    for folder, dirnames, filenames in os.walk(root):
        here = Path(folder)
        for name in sorted(dirnames):
            relative = (here / name).relative_to(root).as_posix()
            if name.startswith("."):
                hidden.append(relative + "/")
                dirnames.remove(name)
            elif (here / name).is_symlink():
                raise ManifestError(f"{relative} is a symlinked folder; copy its files in instead")
        for name in sorted(filenames):
            relative = (here / name).relative_to(root).as_posix()
            if name.startswith("."):
                hidden.append(relative)
                continue
            files.append(_regular_file(here / name, relative, real_root))
            total += files[-1].size
            _check_bounds(len(files), total)
    if not files:
        raise ManifestError(f"{root} holds no files")
    return FolderContents(tuple(sorted(files, key=_path)), tuple(sorted(hidden)))


def _regular_file(path: Path, relative: str, real_root: Path) -> FolderFile:
    """One entry as a FolderFile, or ManifestError naming why it cannot be pushed."""
    check_relative_path(relative)
    if path.is_symlink() and not path.resolve().is_relative_to(real_root):
        raise ManifestError(f"{relative} is a symlink out of the model folder")
    try:
        info = path.stat()
    except OSError as exc:
        raise ManifestError(f"{relative} cannot be read: {exc.strerror}") from exc
    if not stat.S_ISREG(info.st_mode):
        raise ManifestError(f"{relative} is not a regular file")
    return FolderFile(path, relative, info.st_size)


def _check_bounds(count: int, total_bytes: int) -> None:
    """Stop early on a folder far larger than any model."""
    if count > MAX_FILES:
        raise ManifestError(f"a model folder may hold at most {MAX_FILES} files")
    if total_bytes > MAX_TOTAL_BYTES:
        raise ManifestError(f"a model folder may hold at most {MAX_TOTAL_BYTES} bytes")


def _path(entry: FolderFile) -> str:
    return entry.path
