"""Fetching an adapter from where a tenant keeps it: S3, HTTPS or a hub, under an address rule."""

from loraplex.adapters.fetch.addresses import parse_networks, refusal
from loraplex.adapters.fetch.errors import FetchError, FetchProblem
from loraplex.adapters.fetch.pinned import FetchLimits
from loraplex.adapters.fetch.sources import (
    HubSource,
    S3Source,
    Source,
    UrlSource,
    archive_or_folder,
    fetch_source,
    source_from_message,
    source_to_message,
)

__all__ = [
    "FetchError",
    "FetchLimits",
    "FetchProblem",
    "HubSource",
    "S3Source",
    "Source",
    "UrlSource",
    "archive_or_folder",
    "fetch_source",
    "parse_networks",
    "refusal",
    "source_from_message",
    "source_to_message",
]
