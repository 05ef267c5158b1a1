"""A repository fetched through the Hugging Face Hub's HTTP API: the file list from
`/api/models/{repo}/revision/{revision}`, each file from `/{repo}/resolve/{revision}/{file}`
(which the hub answers with a redirect to its CDN, followed under the same address rule)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import httpx

from loraplex.adapters.fetch.errors import FetchError, FetchProblem
from loraplex.adapters.fetch.pinned import FetchLimits, download, read_small
from loraplex.adapters.layout import REQUIRED_FILES

if TYPE_CHECKING:
    from loraplex.adapters.fetch.sources import HubSource


def listed_files(
    client: httpx.Client, source: HubSource, endpoint: str, limits: FetchLimits
) -> set[str]:
    """The file names the repository holds at the revision."""
    revision = quote(source.revision, safe="")
    url = f"{endpoint.rstrip('/')}/api/models/{source.repo}/revision/{revision}"
    try:
        listing = json.loads(read_small(client, url, limits, headers=_auth(source)))
        return {str(s["rfilename"]) for s in listing.get("siblings", [])}
    except FetchError as exc:
        if exc.problem is FetchProblem.SOURCE_NOT_FOUND:
            raise FetchError(
                FetchProblem.SOURCE_NOT_FOUND,
                f"the hub has no repository {source.repo} at revision {source.revision}",
            ) from exc
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise FetchError(FetchProblem.SOURCE_FAILED, "the hub's file list is not readable") from exc


def fetch_repo(
    client: httpx.Client, source: HubSource, endpoint: str, dest: Path, limits: FetchLimits
) -> list[Path]:
    """Download the repository's adapter files into `dest`."""
    present = listed_files(client, source, endpoint, limits)
    missing = [name for name in REQUIRED_FILES if name not in present]
    if missing:
        raise FetchError(
            FetchProblem.BAD_SOURCE,
            f"{source.repo} at {source.revision} has no {' or '.join(missing)} at its top level",
        )
    files, fetched = [], 0
    base = f"{endpoint.rstrip('/')}/{source.repo}/resolve/{quote(source.revision, safe='')}"
    for name in REQUIRED_FILES:
        target = dest / name
        fetched = download(client, f"{base}/{name}", target, limits, fetched, headers=_auth(source))
        files.append(target)
    return files


def _auth(source: HubSource) -> dict[str, str]:
    return {"Authorization": f"Bearer {source.token}"} if source.token else {}
