"""S3 GETs signed with the tenant's credentials (botocore's SigV4 signer) and sent through
the pinned client, so an S3 endpoint passes the same address rule as any other source."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import httpx
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from loraplex.adapters.fetch.pinned import FetchLimits, download

if TYPE_CHECKING:
    from loraplex.adapters.fetch.sources import S3Source


def object_url(source: S3Source, key: str) -> str:
    """The object's URL: path style on a given endpoint, virtual-hosted on AWS."""
    path = quote(key, safe="/~")
    if source.endpoint_url:
        return f"{source.endpoint_url.rstrip('/')}/{source.bucket}/{path}"
    if "." in source.bucket:  # a dotted bucket name breaks the wildcard certificate
        return f"https://s3.{source.region}.amazonaws.com/{source.bucket}/{path}"
    return f"https://{source.bucket}.s3.{source.region}.amazonaws.com/{path}"


def signed_headers(source: S3Source, url: str) -> dict[str, str]:
    """The headers that authenticate a GET of `url` with the source's credentials."""
    credentials = Credentials(
        source.access_key_id, source.secret_access_key, source.session_token or None
    )
    request = AWSRequest(method="GET", url=url, headers={})
    S3SigV4Auth(credentials, "s3", source.region).add_auth(request)
    return {name: str(value) for name, value in request.headers.items()}


def download_object(
    client: httpx.Client,
    source: S3Source,
    key: str,
    dest: Path,
    limits: FetchLimits,
    already: int,
) -> int:
    """Fetch one object into `dest`; S3 redirects (a wrong region) are not followed: the
    signature is for the first host only."""
    url = object_url(source, key)
    return download(
        client, url, dest, limits, already, headers=signed_headers(source, url), max_redirects=0
    )
