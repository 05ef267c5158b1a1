"""LocalStore: atomic writes, sha256 checks, and keys that cannot escape the root."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from loraplex.adapters import ObjectCorrupt, ObjectMissing
from loraplex.adapters.store import LocalStore, S3Store, open_store

KEY = "tenants/t1/adapters/a1/v1/adapter_model.safetensors"


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    """A checked store under a fresh directory."""
    local = LocalStore(tmp_path / "store")
    local.check()
    return local


@pytest.fixture
def payload(tmp_path: Path) -> Path:
    """A 3 MiB file (several chunks)."""
    path = tmp_path / "payload.bin"
    path.write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    return path


def test_put_then_get_returns_the_same_bytes_and_sha256(store, payload, tmp_path):
    stored = store.put_file(KEY, payload)
    store.get_file(KEY, tmp_path / "back.bin", stored.sha256)
    assert (tmp_path / "back.bin").read_bytes() == payload.read_bytes()
    assert stored.sha256 == hashlib.sha256(payload.read_bytes()).hexdigest()
    assert stored.size == payload.stat().st_size


def test_put_leaves_no_temporary_files(store, payload):
    store.put_file(KEY, payload)
    assert store.list_keys("") == [KEY]
    assert list((store.root / ".incoming").iterdir()) == []


def test_get_with_a_different_sha256_raises_and_leaves_no_file(store, payload, tmp_path):
    store.put_file(KEY, payload)
    with pytest.raises(ObjectCorrupt, match=KEY):
        store.get_file(KEY, tmp_path / "back.bin", "0" * 64)
    assert not (tmp_path / "back.bin").exists()


def test_object_changed_on_disk_is_detected_as_corrupt(store, payload, tmp_path):
    stored = store.put_file(KEY, payload)
    (store.root / KEY).write_bytes(b"tampered")
    with pytest.raises(ObjectCorrupt):
        store.get_file(KEY, tmp_path / "back.bin", stored.sha256)


def test_missing_object_raises_object_missing(store, tmp_path):
    with pytest.raises(ObjectMissing):
        store.get_file(KEY, tmp_path / "x", "0" * 64)
    with pytest.raises(ObjectMissing):
        store.open_chunks(KEY)
    assert not store.exists(KEY)


def test_open_chunks_streams_the_object(store, payload):
    store.put_file(KEY, payload)
    assert b"".join(store.open_chunks(KEY)) == payload.read_bytes()


def test_stat_reports_size_and_sha256(store, payload):
    stored = store.put_file(KEY, payload)
    assert store.stat(KEY) == stored


@pytest.mark.parametrize("key", ["../outside", "/etc/passwd", "a/../../b", "a//b", ".hidden/x", ""])
def test_keys_that_could_escape_the_root_are_refused(store, payload, key):
    with pytest.raises(ValueError):
        store.put_file(key, payload)


def test_symlinked_folder_inside_the_root_cannot_be_followed_out(store, payload, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (store.root / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="escapes"):
        store.put_file("link/file", payload)


def test_delete_prefix_removes_only_that_prefix(store, payload):
    for key in ["t/a/v1/x", "t/a/v1/y", "t/a/v10/x", "t/b/v1/x"]:
        store.put_file(key, payload)
    assert store.delete_prefix("t/a/v1/") == 2
    assert store.list_keys("t/") == ["t/a/v10/x", "t/b/v1/x"]
    assert not (store.root / "t/a/v1").exists()


def test_delete_prefix_without_trailing_slash_is_refused(store):
    with pytest.raises(ValueError, match="end with '/'"):
        store.delete_prefix("t/a/v1")


def test_delete_of_a_missing_object_is_not_an_error(store):
    store.delete(KEY)
    assert not store.exists(KEY)


def test_local_store_has_no_presigned_urls(store, payload):
    store.put_file(KEY, payload)
    assert store.presigned_url(KEY, 60) is None


def test_open_store_builds_each_kind(tmp_path):
    assert isinstance(open_store("local", root=tmp_path), LocalStore)
    s3 = open_store(
        "s3", bucket="b", endpoint_url="http://127.0.0.1:9", access_key="k", secret_key="s"
    )
    assert isinstance(s3, S3Store)
    with pytest.raises(ValueError, match="unknown"):
        open_store("ftp")
