"""Importing a version from S3, HTTPS and the hub: the API queues it, a real worker fetches
it and the upload path validates and stores it; a refused source fails the job by name and
leaves no version."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path
from urllib.parse import quote

from tests.integration.adapter_import.conftest import Importer, TenantS3
from tests.support.hub_server import HubServer
from tests.support.lora_files import write_adapter

FILES = ("adapter_config.json", "adapter_model.safetensors")


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tar_gz(folder: Path, target: Path) -> Path:
    """The adapter's two files as a .tar.gz at `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w:gz") as archive:
        for name in FILES:
            archive.add(folder / name, arcname=name)
    return target


def s3_source(s3: TenantS3, key: str, secret: str | None = None) -> dict:
    return {
        "s3": {
            "url": f"s3://{s3.bucket}/{key}",
            "access_key_id": s3.access_key_id,
            "secret_access_key": secret or s3.secret_access_key,
            "endpoint_url": s3.endpoint_url,
        }
    }


async def test_an_s3_folder_imports_as_a_ready_version_with_its_progress(
    importer: Importer, tenant_s3: TenantS3, tmp_path: Path
) -> None:
    folder = write_adapter(tmp_path / "a", rank=8)
    prefix = f"{importer.adapter}/v1/"
    for name in FILES:
        tenant_s3.client().upload_file(str(folder / name), tenant_s3.bucket, prefix + name)

    response = await importer.start(s3_source(tenant_s3, prefix))
    assert tenant_s3.secret_access_key not in response.text
    job = await importer.finished(response)

    assert job["status"] == "succeeded", job
    assert job["source"] == {
        "kind": "s3", "url": f"s3://{tenant_s3.bucket}/{prefix}", "region": "us-east-1",
        "endpoint_url": tenant_s3.endpoint_url,
    }  # fmt: skip
    messages = [e["message"] for e in job["events"]]
    assert messages[0] == "queued" and messages[-1] == "stored as version 1", messages
    version = (await importer.api.get(f"{importer.versions}/1")).json()
    assert version["status"] == "ready" and version["source"] == "import"
    assert version["rank"] == 8
    assert version["sha256"] == sha256_of(folder / "adapter_model.safetensors")


async def test_s3_credentials_the_bucket_refuses_fail_the_import_and_store_nothing(
    importer: Importer, tenant_s3: TenantS3, tmp_path: Path
) -> None:
    folder = write_adapter(tmp_path / "a")
    prefix = f"{importer.adapter}/denied/"
    for name in FILES:
        tenant_s3.client().upload_file(str(folder / name), tenant_s3.bucket, prefix + name)

    job = await importer.finished(
        await importer.start(s3_source(tenant_s3, prefix, secret="not-the-secret"))
    )

    assert job["status"] == "failed"
    assert job["error"]["code"] == "source_denied", job["error"]
    assert "credentials" in job["error"]["message"]
    assert "not-the-secret" not in str(job) and tenant_s3.access_key_id not in str(job)
    assert await importer.version_count() == 0


async def test_an_https_archive_imports_over_tls_from_the_test_ca(
    importer: Importer, https_server: HubServer, tmp_path: Path
) -> None:
    folder = write_adapter(tmp_path / "a", rank=16)
    tar_gz(folder, https_server.root / importer.adapter / "adapter.tar.gz")

    job = await importer.finished(
        await importer.start({"url": f"{https_server.url}/files/{importer.adapter}/adapter.tar.gz"})
    )

    assert job["status"] == "succeeded", job
    version = (await importer.api.get(f"{importer.versions}/1")).json()
    assert version["rank"] == 16
    assert version["sha256"] == sha256_of(folder / "adapter_model.safetensors")


async def test_a_hub_repository_imports_through_the_hubs_http_api(
    importer: Importer, https_server: HubServer, tmp_path: Path
) -> None:
    repo = f"org/{importer.adapter}"
    folder = write_adapter(https_server.root / "hub" / repo / "v2", readme=True)

    job = await importer.finished(await importer.start({"hub": {"repo": repo, "revision": "v2"}}))

    assert job["status"] == "succeeded", job
    assert job["source"] == {"kind": "hub", "repo": repo, "revision": "v2"}
    version = (await importer.api.get(f"{importer.versions}/1")).json()
    assert version["sha256"] == sha256_of(folder / "adapter_model.safetensors")
    assert f"/api/models/{repo}/revision/v2" in https_server.requests
    assert f"/{repo}/resolve/v2/adapter_model.safetensors" in https_server.requests


async def test_a_link_local_source_is_refused_without_a_connection(importer: Importer) -> None:
    job = await importer.finished(
        await importer.start({"url": "https://169.254.169.254/latest/adapter.tar.gz"})
    )

    assert job["status"] == "failed"
    assert job["error"]["code"] == "address_refused"
    assert "link-local" in job["error"]["message"]
    assert await importer.version_count() == 0


async def test_a_redirect_to_a_private_address_is_refused(
    importer: Importer, https_server: HubServer
) -> None:
    target = quote("https://10.1.2.3/adapter.tar.gz", safe="")
    job = await importer.finished(
        await importer.start({"url": f"{https_server.url}/go/adapter.tar.gz?to={target}"})
    )

    assert job["status"] == "failed"
    assert job["error"]["code"] == "address_refused"
    assert "private address" in job["error"]["message"]


async def test_a_source_over_the_size_limit_fails_before_it_is_stored(
    importer: Importer, https_server: HubServer
) -> None:
    big = https_server.root / importer.adapter / "big.tar.gz"
    big.parent.mkdir(parents=True, exist_ok=True)
    big.write_bytes(b"\0" * (3 * 2**20))  # the import settings allow 2 MiB

    job = await importer.finished(
        await importer.start({"url": f"{https_server.url}/files/{importer.adapter}/big.tar.gz"})
    )

    assert job["status"] == "failed"
    assert job["error"]["code"] == "too_large"
    assert str(2 * 2**20) in job["error"]["message"]
    assert await importer.version_count() == 0


async def test_an_archive_that_is_not_one_fails_with_the_uploads_own_refusal(
    importer: Importer, https_server: HubServer
) -> None:
    fake = https_server.root / importer.adapter / "adapter.zip"
    fake.parent.mkdir(parents=True, exist_ok=True)
    fake.write_bytes(b"these bytes are not a zip archive" * 10)

    job = await importer.finished(
        await importer.start({"url": f"{https_server.url}/files/{importer.adapter}/adapter.zip"})
    )

    assert job["status"] == "failed"
    assert job["error"]["code"] == "bad_archive", job["error"]
    assert await importer.version_count() == 0


async def test_a_hub_repository_with_pickled_weights_only_names_the_missing_file(
    importer: Importer, https_server: HubServer
) -> None:
    repo = f"org/{importer.adapter}-bin"
    folder = https_server.root / "hub" / repo / "main"
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    (folder / "adapter_model.bin").write_bytes(b"pickle")

    job = await importer.finished(await importer.start({"hub": {"repo": repo}}))

    assert job["status"] == "failed"
    assert job["error"]["code"] == "bad_source"
    assert "adapter_model.safetensors" in job["error"]["message"]


async def test_a_source_the_api_cannot_use_is_a_400_naming_it(importer: Importer) -> None:
    cases = [
        ("source.url", {"url": "https://example.com/adapter.exe"}, "archive"),
        ("source.url", {"url": "http://example.com/adapter.tar.gz"}, "HTTPS URL"),
        ("source.hub.repo", {"hub": {"repo": "../etc"}}, "<organisation>/<name>"),
        ("source", {"ftp": "ftp://example.com/a/"}, "unknown field `ftp`"),
    ]
    for param, source, said in cases:
        response = await importer.start(source)
        assert response.status_code == 400, response.text
        assert response.json()["param"] == param, response.text
        assert said in response.json()["detail"], response.text
    both = await importer.start({"url": "https://e.com/a/", "hub": {"repo": "o/n"}})
    assert both.status_code == 400 and "exactly one" in both.json()["detail"]
    assert await importer.version_count() == 0


async def test_an_oversized_or_deeply_nested_import_body_is_refused_by_name(
    importer: Importer,
) -> None:
    headers = {"Content-Type": "application/json"}
    huge = b'{"source": {"url": "https://e.com/' + b"a" * 20_000 + b'/"}}'
    deep = b'{"source": ' + b"[" * 5_000 + b"]" * 5_000 + b"}"

    too_large = await importer.api.post(importer.versions, content=huge, headers=headers)
    too_deep = await importer.api.post(importer.versions, content=deep, headers=headers)

    assert too_large.status_code == 413 and "16384 bytes" in too_large.json()["detail"]
    assert too_deep.status_code == 400, too_deep.text
    assert await importer.version_count() == 0
