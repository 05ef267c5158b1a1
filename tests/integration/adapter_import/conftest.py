"""Adapter imports end to end: the API in-process, a real Celery worker, and three sources
on loopback — an S3 server that checks credentials, an HTTPS file server and a hub stand-in
(both certified by a test CA the worker is told to trust).

The API and the worker get their own broker database, so the fine-tuning suite's worker
(same code, settings without the loopback allow-list) never takes an import task.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import boto3
import httpx
import pytest
import trustme
from litestar import Litestar
from litestar.testing import AsyncTestClient

from loraplex.app import create_app
from loraplex.settings import Settings
from tests.conftest import Api
from tests.integration.finetune.conftest import Process
from tests.support.adapter_api import create_adapter, ensure_tiny_base
from tests.support.hub_server import HubServer, hub_server
from tests.support.hygiene import check_error_body
from tests.support.s3_server import REGION, S3Server

BROKER_URL = os.environ.get("LORAPLEX_TEST_IMPORT_BROKER", "redis://127.0.0.1:6379/12")
LOOPBACK = "127.0.0.0/8,::1/128"


@dataclass(frozen=True)
class TenantS3:
    """The tenant's own S3 (a second moto server that checks keys) and its bucket."""

    endpoint_url: str
    bucket: str
    access_key_id: str
    secret_access_key: str

    def client(self) -> Any:
        """boto3 with the tenant's keys, for putting the objects an import fetches."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
        )


@pytest.fixture(scope="session")
def tenant_s3() -> Iterator[TenantS3]:
    """A moto server where only an IAM user's keys work, as on AWS: the user is made while
    the server still lets everyone in, then `reset-auth` makes it check every request."""
    with S3Server() as server:
        iam = boto3.client(
            "iam", endpoint_url=server.endpoint_url, region_name=REGION,
            aws_access_key_id="setup", aws_secret_access_key="setup",
        )  # fmt: skip
        iam.create_user(UserName="tenant")
        iam.put_user_policy(
            UserName="tenant",
            PolicyName="s3",
            PolicyDocument='{"Version": "2012-10-17", "Statement": '
            '[{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}',
        )
        key = iam.create_access_key(UserName="tenant")["AccessKey"]
        bucket = f"tenant-{secrets.token_hex(4)}"
        s3 = TenantS3(server.endpoint_url, bucket, key["AccessKeyId"], key["SecretAccessKey"])
        s3.client().create_bucket(Bucket=bucket)
        httpx.post(f"{server.endpoint_url}/moto-api/reset-auth", content=b"0").raise_for_status()
        yield s3


@pytest.fixture(scope="session")
def test_ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[trustme.CA, Path]:
    """A test CA and its certificate as a PEM file (the worker's `import_ca_file`)."""
    ca = trustme.CA()
    pem = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    return ca, pem


@pytest.fixture(scope="session")
def https_server(
    test_ca: tuple[trustme.CA, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HubServer]:
    """The HTTPS file server and hub stand-in, on loopback."""
    with hub_server(tmp_path_factory.mktemp("served"), test_ca[0]) as server:
        yield server


@pytest.fixture(scope="session")
def import_settings(
    settings: Settings, https_server: HubServer, test_ca: tuple[trustme.CA, Path]
) -> Settings:
    """The suite's settings with loopback allowed, the test CA trusted, the hub stand-in."""
    return replace(
        settings,
        broker_url=BROKER_URL,
        hub_endpoint=https_server.url,
        import_allow_networks=LOOPBACK,
        import_ca_file=str(test_ca[1]),
        import_timeout_s=60.0,
        max_upload_bytes=2 * 2**20,
    )


@pytest.fixture(scope="session")
def import_worker(import_settings: Settings) -> Iterator[Process]:
    """A Celery worker on the `default` queue of the imports' broker."""
    process = Process(["worker", "-Q", "default", "-c", "1"], import_settings.to_env()).start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
async def import_client(
    import_settings: Settings, import_worker: Process
) -> AsyncIterator[AsyncTestClient[Litestar]]:
    """An in-process API with the import settings (its own app: its own broker)."""
    async with AsyncTestClient(app=create_app(import_settings)) as client:
        client.event_hooks = {"request": [], "response": [check_error_body]}
        yield client


@dataclass
class Importer:
    """A tenant with an adapter, and the calls an import test makes."""

    api: Api
    tenant_id: str
    adapter: str

    @property
    def versions(self) -> str:
        """The adapter's versions URL."""
        return f"/api/v1/tenants/{self.tenant_id}/adapters/{self.adapter}/versions"

    async def start(self, source: dict[str, Any]) -> Any:
        """POST the source; the response."""
        return await self.api.post(self.versions, json={"source": source})

    async def finished(self, response: Any, timeout_s: float = 90.0) -> dict[str, Any]:
        """Wait for the import `response` started to succeed or fail; its final state."""
        assert response.status_code == 202, response.text
        url = self.versions.rsplit("/versions", 1)[0] + f"/imports/{response.json()['id']}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = (await self.api.get(url)).json()
            if job["status"] in ("succeeded", "failed"):
                return job
            await anyio.sleep(0.2)
        raise AssertionError(f"import still {job['status']}: {job}")

    async def version_count(self) -> int:
        """How many versions the adapter has (any status)."""
        return int((await self.api.get(self.versions)).json()["total"])


@pytest.fixture
async def importer(import_client: AsyncTestClient[Litestar], operator_key: str) -> Importer:
    """A fresh tenant (admin key) with an empty adapter on the tiny base model."""
    operator = Api(import_client, operator_key)
    slug = f"imp-{secrets.token_hex(4)}"
    tenant = await operator.post(
        "/api/v1/tenants", json={"slug": slug, "name": slug, "plan": "pro"}
    )
    assert tenant.status_code == 201, tenant.text
    tenant_id = tenant.json()["id"]
    key = await operator.post(
        f"/api/v1/tenants/{tenant_id}/api-keys", json={"name": "admin", "scopes": ["admin"]}
    )
    assert key.status_code == 201, key.text
    api = Api(import_client, key.json()["key"])
    await ensure_tiny_base(operator)
    return Importer(api, tenant_id, await create_adapter(api, tenant_id))
