"""Object stores for adapter files: S3 in production, a local directory when embedded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loraplex.adapters.store.base import ObjectStore, StoredObject
from loraplex.adapters.store.local import LocalStore
from loraplex.adapters.store.s3 import S3Store

__all__ = ["LocalStore", "ObjectStore", "S3Store", "StoredObject", "open_store"]


def open_store(kind: str, **kwargs: Any) -> ObjectStore:
    """Build a store by kind: `local` (root=...) or `s3` (S3Store's arguments)."""
    if kind == "local":
        return LocalStore(Path(kwargs["root"]))
    if kind == "s3":
        return S3Store(**kwargs)
    raise ValueError(f"unknown object store kind {kind!r}; use 'local' or 's3'")
