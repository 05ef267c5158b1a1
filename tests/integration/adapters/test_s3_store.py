"""S3Store against a real S3 HTTP server on loopback."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import httpx
import pytest

from loraplex.adapters import ObjectCorrupt, ObjectMissing, StoreUnavailable
from loraplex.adapters.store import S3Store
from tests.support.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server

KEY = "tenants/t1/adapters/a1/v1/adapter_model.safetensors"
MIB = 1024 * 1024


def random_file(path: Path, size: int) -> Path:
    """A file of `size` random bytes."""
    path.write_bytes(os.urandom(size))
    return path


def test_put_then_get_round_trips_with_sha256(s3_store, tmp_path):
    payload = random_file(tmp_path / "payload.bin", 2 * MIB + 3)
    stored = s3_store.put_file(KEY, payload)
    s3_store.get_file(KEY, tmp_path / "back.bin", stored.sha256)
    assert (tmp_path / "back.bin").read_bytes() == payload.read_bytes()
    assert stored.sha256 == hashlib.sha256(payload.read_bytes()).hexdigest()
    assert s3_store.stat(KEY) == stored  # size and the sha256 kept in object metadata


def test_large_file_is_uploaded_in_parts(make_s3_store, raw_s3, tmp_path):
    store = make_s3_store(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    payload = random_file(tmp_path / "big.bin", 11 * MIB)
    stored = store.put_file(KEY, payload)
    etag = raw_s3.head_object(Bucket=store.bucket, Key=KEY)["ETag"]
    assert etag.strip('"').endswith("-3")  # S3's mark of a 3-part multipart upload
    store.get_file(KEY, tmp_path / "back.bin", stored.sha256)
    assert (tmp_path / "back.bin").read_bytes() == payload.read_bytes()


def test_object_replaced_behind_the_store_is_detected_as_corrupt(s3_store, raw_s3, tmp_path):
    stored = s3_store.put_file(KEY, random_file(tmp_path / "payload.bin", 1000))
    raw_s3.put_object(Bucket=s3_store.bucket, Key=KEY, Body=b"tampered")
    with pytest.raises(ObjectCorrupt, match=KEY):
        s3_store.get_file(KEY, tmp_path / "back.bin", stored.sha256)
    assert not (tmp_path / "back.bin").exists()


def test_missing_object_raises_object_missing(s3_store, tmp_path):
    with pytest.raises(ObjectMissing):
        s3_store.get_file(KEY, tmp_path / "back.bin", "0" * 64)
    with pytest.raises(ObjectMissing):
        s3_store.open_chunks(KEY)
    assert not s3_store.exists(KEY)


def test_open_chunks_streams_the_object(s3_store, tmp_path):
    payload = random_file(tmp_path / "payload.bin", 3 * MIB)
    s3_store.put_file(KEY, payload)
    assert b"".join(s3_store.open_chunks(KEY)) == payload.read_bytes()


def test_presigned_url_downloads_the_object_without_credentials(s3_store, tmp_path):
    payload = random_file(tmp_path / "payload.bin", 4096)
    s3_store.put_file(KEY, payload)
    url = s3_store.presigned_url(KEY, expires_s=60)
    response = httpx.get(url)
    assert response.status_code == 200
    assert response.content == payload.read_bytes()


def test_delete_prefix_removes_only_that_prefix(s3_store, tmp_path):
    payload = random_file(tmp_path / "payload.bin", 10)
    for key in ["t/a/v1/x", "t/a/v1/y", "t/a/v10/x", "t/b/v1/x"]:
        s3_store.put_file(key, payload)
    assert s3_store.delete_prefix("t/a/v1/") == 2
    assert s3_store.list_keys("t/") == ["t/a/v10/x", "t/b/v1/x"]


def test_check_refuses_a_missing_bucket_it_may_not_create(s3_server):
    store = S3Store(
        bucket="never-created",
        endpoint_url=s3_server.endpoint_url,
        region=REGION,
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
    )
    with pytest.raises(StoreUnavailable, match="never-created"):
        store.check()


@pytest.fixture
def own_server():
    """A server this test may stop without disturbing the others."""
    with S3Server() as server:
        yield server


def test_store_outage_raises_store_unavailable(make_s3_store, own_server, tmp_path):
    store = make_s3_store(own_server)
    payload = random_file(tmp_path / "payload.bin", 1000)
    own_server.stop()
    with pytest.raises(StoreUnavailable):
        store.put_file(KEY, payload)
    with pytest.raises(StoreUnavailable):
        store.check()


def test_outage_in_the_middle_of_a_multipart_upload_raises_store_unavailable(
    make_s3_store, own_server, tmp_path
):
    store = make_s3_store(
        own_server, multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB, max_concurrency=1
    )
    # Cut the server off right after the first part is accepted.
    store._client.meta.events.register("after-call.s3.UploadPart", lambda **_: own_server.stop())
    with pytest.raises(StoreUnavailable):
        store.put_file(KEY, random_file(tmp_path / "big.bin", 16 * MIB))


def test_store_recovers_when_the_server_comes_back(make_s3_store, own_server, tmp_path):
    store = make_s3_store(own_server)
    own_server.stop()
    own_server.start()  # same port, but moto forgets everything: check() recreates the bucket
    store.check()
    stored = store.put_file(KEY, random_file(tmp_path / "payload.bin", 1000))
    assert store.stat(KEY) == stored
