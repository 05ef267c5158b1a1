"""A base model's files in the object store: where they live and the manifest that lists them.

A pushed model is `base-models/<name>/files/<relative path>` for each file, and
`base-models/<name>/manifest.json` listing every file's path, size and sha256. The manifest
is written last and removed first, so a model whose manifest can be read is complete.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated

import msgspec

from loraplex.adapters.store.base import KEY_PART

STORE_PREFIX = "base-models/"
MANIFEST_FORMAT = 1
# A 405B model in fp32 is about 1.6 TB in a few hundred shards; these bounds leave room for
# that and refuse a folder (or manifest) that is plainly not a model.
MAX_FILES = 10_000
MAX_TOTAL_BYTES = 4 * 1024**4
MAX_PATH_CHARS = 512
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
# The same rule as base model registration (service.ModelName), kept here so a node that only
# pulls need not import the database layer.
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")

Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$(?!\n)")]
Size = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOTAL_BYTES)]


class ManifestError(Exception):
    """A model name, folder or manifest that cannot be copied; the message says why."""


class ManifestFile(msgspec.Struct, frozen=True):
    """One file of a model: its path relative to the model folder, size and sha256."""

    path: str
    size: Size
    sha256: Sha256


class Manifest(msgspec.Struct, frozen=True):
    """Every file of one pushed model."""

    name: str
    files: tuple[ManifestFile, ...]
    format: int = MANIFEST_FORMAT

    @property
    def total_bytes(self) -> int:
        """The size of all the model's files together."""
        return sum(f.size for f in self.files)


def check_model_name(name: str) -> str:
    """Return `name` if it is a valid base model name, else ManifestError saying the rule."""
    if not MODEL_NAME.fullmatch(name):
        raise ManifestError(
            f"invalid model name {name!r}: 1 to 200 characters of letters, digits, '.', '_' "
            f"and '-', starting with a letter or digit"
        )
    return name


def check_relative_path(path: str) -> str:
    """Return `path` if it is a safe relative file path (no `..`, no leading dots), else raise."""
    if not path or len(path) > MAX_PATH_CHARS:
        raise ManifestError(f"file path must have 1 to {MAX_PATH_CHARS} characters: {path!r}")
    if not all(KEY_PART.fullmatch(part) for part in path.split("/")):
        raise ManifestError(
            f"file path {path!r} has a part the object store cannot hold (letters, digits and "
            f"'_.=+-' only, not starting with a dot)"
        )
    return path


def model_prefix(name: str) -> str:
    """Every key of model `name` starts with this."""
    return f"{STORE_PREFIX}{check_model_name(name)}/"


def manifest_key(name: str) -> str:
    """Where model `name`'s manifest lives."""
    return f"{model_prefix(name)}manifest.json"


def files_prefix(name: str) -> str:
    """Where model `name`'s files live."""
    return f"{model_prefix(name)}files/"


def file_key(name: str, path: str) -> str:
    """The key of one file of model `name`."""
    return f"{files_prefix(name)}{check_relative_path(path)}"


def encode_manifest(manifest: Manifest) -> bytes:
    """The manifest as stored: JSON, files sorted by path."""
    ordered = msgspec.structs.replace(manifest, files=tuple(sorted(manifest.files, key=_path)))
    check_manifest(ordered)
    return msgspec.json.format(msgspec.json.encode(ordered), indent=2) + b"\n"


def decode_manifest(data: bytes, expected_name: str) -> Manifest:
    """Parse and check a stored manifest; ManifestError names what is wrong with it."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"manifest of {expected_name!r} is over {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = msgspec.json.decode(data, type=Manifest)
    except msgspec.ValidationError as exc:
        raise ManifestError(f"manifest of {expected_name!r} is not valid: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ManifestError(f"manifest of {expected_name!r} is not JSON: {exc}") from exc
    if manifest.format != MANIFEST_FORMAT:
        raise ManifestError(
            f"manifest of {expected_name!r} has format {manifest.format}; this version of "
            f"loraplex reads format {MANIFEST_FORMAT}"
        )
    if manifest.name != expected_name:
        raise ManifestError(f"manifest under {expected_name!r} names {manifest.name!r}")
    check_manifest(manifest)
    return manifest


def manifest_sha256(data: bytes) -> str:
    """The sha256 of a manifest's stored bytes: what a pulled copy's marker records."""
    return hashlib.sha256(data).hexdigest()


def check_manifest(manifest: Manifest) -> None:
    """Bounds and paths: within the limits, each path safe, unique and not under another."""
    check_model_name(manifest.name)
    if len(manifest.files) > MAX_FILES:
        raise ManifestError(f"a model may have at most {MAX_FILES} files")
    if manifest.total_bytes > MAX_TOTAL_BYTES:
        raise ManifestError(f"a model may have at most {MAX_TOTAL_BYTES} bytes")
    paths = {check_relative_path(f.path) for f in manifest.files}
    if len(paths) != len(manifest.files):
        raise ManifestError("the manifest lists a path twice")
    for path in paths:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in paths:
                parent = "/".join(parts[:depth])
                raise ManifestError(f"{path!r} would be inside the file {parent!r}")


def _path(entry: ManifestFile) -> str:
    return entry.path
