"""An S3 server on loopback (moto's server mode) and stores on fresh buckets in it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from loraplex.adapters.store import S3Store
from tests.support.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server


@pytest.fixture
def make_s3_store(s3_server: S3Server) -> Callable[..., S3Store]:
    """Build a checked S3Store on a new bucket of the given server (default: the shared one)."""

    def make(server: S3Server = s3_server, **options: Any) -> S3Store:
        store = S3Store(
            bucket=f"test-{uuid.uuid4().hex[:12]}",
            endpoint_url=server.endpoint_url,
            region=REGION,
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            create_bucket=True,
            **options,
        )
        store.check()
        return store

    return make


@pytest.fixture
def s3_store(make_s3_store: Callable[..., S3Store]) -> S3Store:
    """An S3Store on its own bucket with default settings."""
    return make_s3_store()


@pytest.fixture
def raw_s3(s3_server: S3Server) -> Any:
    """A plain boto3 client, for changing objects behind the store's back."""
    return boto3.client(
        "s3",
        endpoint_url=s3_server.endpoint_url,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )
