"""A stored adapter version's file as an HTTP download, for the API and the console."""

from __future__ import annotations

from litestar.response import Stream

from loraplex.adapters.store import ObjectStore
from loraplex.control.adapters.storage import VERSION_FILES
from loraplex.control.adapters.versions import VersionService
from loraplex.db.models import Adapter
from loraplex.errors import NotFound


async def stream_version_file(
    versions: VersionService, adapter: Adapter, number: int, filename: str, store: ObjectStore
) -> Stream:
    """One file of a stored version, streamed from the object store with its sha256."""
    if filename not in VERSION_FILES:
        raise NotFound(f"version files are {', '.join(VERSION_FILES)}")
    version = await versions.stored(adapter, number)
    sha = version.details.get("files", {}).get(filename, {}).get("sha256", "")
    return Stream(
        store.open_chunks(version.storage_key + filename),
        media_type="application/octet-stream",
        headers={"x-sha256": sha, "content-disposition": f'attachment; filename="{filename}"'},
    )
