"""Where an imported adapter comes from, and how a source becomes files on disk.

A URL (`s3://bucket/key` or `https://...`) names either a folder — it ends in `/`, and holds
`adapter_config.json` and `adapter_model.safetensors` — or one archive (`.tar.gz`, `.tgz`,
`.tar`, `.zip`). Over HTTPS there is no folder listing: the folder form fetches the two
files by their names. A hub source is a repository at a revision, read through the Hugging
Face Hub's HTTP API (`hub.py`). The files land in `dest` exactly as an upload's would, so the
upload path unpacks and validates them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loraplex.adapters.archive import ARCHIVE_SUFFIXES
from loraplex.adapters.fetch import hub, s3
from loraplex.adapters.fetch.errors import FetchError, FetchProblem
from loraplex.adapters.fetch.pinned import FetchLimits, download, http_client
from loraplex.adapters.layout import REQUIRED_FILES


@dataclass(frozen=True)
class S3Source:
    """An object or a folder in an S3 bucket, with the tenant's credentials."""

    bucket: str
    key: str  # "" or ending in "/": a folder
    access_key_id: str
    secret_access_key: str
    session_token: str = ""
    endpoint_url: str = ""  # empty: AWS in `region`
    region: str = "us-east-1"


@dataclass(frozen=True)
class UrlSource:
    """An https:// folder or archive."""

    url: str


@dataclass(frozen=True)
class HubSource:
    """A repository of the hub at a revision (branch, tag or commit)."""

    repo: str
    revision: str = "main"
    token: str = ""


Source = S3Source | UrlSource | HubSource
KINDS: dict[str, type[S3Source] | type[UrlSource] | type[HubSource]] = {
    "s3": S3Source,
    "url": UrlSource,
    "hub": HubSource,
}


def source_to_message(source: Source) -> dict[str, Any]:
    """The source as a JSON object, credentials included (only ever sent sealed)."""
    kind = next(k for k, cls in KINDS.items() if isinstance(source, cls))
    return {"kind": kind, **asdict(source)}


def source_from_message(message: dict[str, Any]) -> Source:
    """The inverse of `source_to_message`."""
    fields = dict(message)
    return KINDS[fields.pop("kind")](**fields)


def archive_or_folder(path: str) -> str | None:
    """The archive suffix `path` ends in, "" for a folder, None when it is neither."""
    if path == "" or path.endswith("/"):
        return ""
    return next((s for s in ARCHIVE_SUFFIXES if path.lower().endswith(s)), None)


def fetch_source(source: Source, dest: Path, limits: FetchLimits, hub_endpoint: str) -> list[Path]:
    """Download the source's files into the empty folder `dest`; the files, for unpacking."""
    with http_client(limits) as client:
        if isinstance(source, HubSource):
            return hub.fetch_repo(client, source, hub_endpoint, dest, limits)
        path = source.key if isinstance(source, S3Source) else _url_path(source.url)
        suffix = archive_or_folder(path)
        if suffix is None:
            raise FetchError(FetchProblem.BAD_SOURCE, _SHAPES)
        names = REQUIRED_FILES if suffix == "" else ("",)
        files, fetched = [], 0
        for name in names:
            target = dest / (name or f"adapter{suffix}")
            if isinstance(source, S3Source):
                fetched = s3.download_object(
                    client, source, source.key + name, target, limits, fetched
                )
            else:
                fetched = download(client, source.url + name, target, limits, fetched)
            files.append(target)
        return files


def _url_path(url: str) -> str:
    return url.split("?", 1)[0].split("#", 1)[0].split("://", 1)[-1].partition("/")[2]


_SHAPES = (
    "the URL must name a folder (ending in /) holding adapter_config.json and "
    "adapter_model.safetensors, or a .tar.gz, .tgz, .tar or .zip archive"
)
