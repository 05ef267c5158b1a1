"""Base models through the object store, as an engine node's init container uses them.

Each test runs on the local store and on S3 over HTTP (the loopback server): push a model
folder, pull it into a fresh folder, and check what an operator would notice: the files, what
a second start costs, what survives an interrupted pull, what a missing model says.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from loraplex.adapters.errors import StoreUnavailable
from loraplex.adapters.store.base import ObjectStore, StoredObject
from loraplex.control.base_models.manifest import manifest_key
from loraplex.control.base_models.pull import MARKER_NAME, ModelNotInStore, pull_model
from loraplex.control.base_models.push import push_model

NAME = "Tiny-Chat-1B"


def tree(root: Path) -> dict[str, bytes]:
    """Every visible file under `root` by relative path, with its bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    }


def quiet(line: str) -> None:
    """Progress lines are not under test here."""


def pull(store: ObjectStore, dest: Path, **options: Any) -> Any:
    """Pull NAME into `dest`."""
    return pull_model(store, NAME, dest, say=quiet, **options)


class FailingDownloads:
    """The store, but downloads fail after `allowed` files, leaving a partial file behind as a
    killed process or a cut connection would."""

    def __init__(self, store: ObjectStore, allowed: int) -> None:
        self.store = store
        self.allowed = allowed

    def get_file(self, key: str, dest: Path, expected_sha256: str) -> None:
        """Download, or fail halfway once the allowance is spent."""
        if self.allowed == 0:
            dest.write_bytes(b"half a shard")
            raise StoreUnavailable(f"S3 download of {key!r} failed: connection reset")
        self.allowed -= 1
        self.store.get_file(key, dest, expected_sha256)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


class FailingUploads:
    """The store, but uploads fail after `allowed` files (the connection is cut)."""

    def __init__(self, store: ObjectStore, allowed: int) -> None:
        self.store = store
        self.allowed = allowed

    def put_file(self, key: str, path: Path) -> StoredObject:
        """Upload, or fail once the allowance is spent."""
        if self.allowed == 0:
            raise StoreUnavailable(f"S3 upload of {key!r} failed: connection reset")
        self.allowed -= 1
        return self.store.put_file(key, path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_the_pulled_folder_equals_the_pushed_one_byte_for_byte(
    store: ObjectStore, model_dir: Path, tmp_path: Path
) -> None:
    pushed = push_model(store, model_dir, say=quiet)
    report = pull(store, tmp_path / "models" / NAME)
    assert tree(tmp_path / "models" / NAME) == tree(model_dir)
    assert (report.fetched_files, report.kept_files) == (len(tree(model_dir)), 0)
    assert report.fetched_bytes == pushed.bytes == sum(map(len, tree(model_dir).values()))


def test_a_second_pull_fetches_nothing_and_leaves_the_files_untouched(
    store: ObjectStore, model_dir: Path, tmp_path: Path
) -> None:
    push_model(store, model_dir, say=quiet)
    dest = tmp_path / "models" / NAME
    pull(store, dest)
    before = {p: p.stat().st_mtime_ns for p in dest.rglob("*")}
    again = pull(store, dest)
    assert again.is_skipped and again.fetched_files == 0 and again.fetched_bytes == 0
    assert {p: p.stat().st_mtime_ns for p in dest.rglob("*")} == before


def test_a_truncated_file_is_fetched_again_and_the_rest_kept(
    store: ObjectStore, model_dir: Path, tmp_path: Path
) -> None:
    push_model(store, model_dir, say=quiet)
    dest = tmp_path / "models" / NAME
    pull(store, dest)
    shard = dest / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:1000])
    report = pull(store, dest)
    assert report.fetched_files == 1 and report.kept_files == len(tree(model_dir)) - 1
    assert tree(dest) == tree(model_dir)


def test_a_file_corrupted_in_place_is_fetched_again_by_verify(
    store: ObjectStore, model_dir: Path, tmp_path: Path
) -> None:
    push_model(store, model_dir, say=quiet)
    dest = tmp_path / "models" / NAME
    pull(store, dest)
    shard = dest / "model-00002-of-00002.safetensors"
    shard.write_bytes(bytes(shard.stat().st_size))  # same size, other bytes
    report = pull(store, dest, verify=True)
    assert report.fetched_files == 1 and not report.is_skipped
    assert tree(dest) == tree(model_dir)


def test_a_pull_cut_off_midway_then_run_again_completes(
    store: ObjectStore, model_dir: Path, tmp_path: Path
) -> None:
    push_model(store, model_dir, say=quiet)
    dest = tmp_path / "models" / NAME
    with pytest.raises(StoreUnavailable):
        pull_model(FailingDownloads(store, allowed=2), NAME, dest, say=quiet)  # type: ignore[arg-type]
    assert len(tree(dest)) == 2 and not (dest / MARKER_NAME).exists()
    report = pull(store, dest)
    assert (report.fetched_files, report.kept_files) == (len(tree(model_dir)) - 2, 2)
    assert tree(dest) == tree(model_dir)
    assert sorted(p.name for p in dest.iterdir() if p.name.startswith(".")) == [MARKER_NAME]


def test_a_model_not_in_the_store_is_a_clear_error_that_says_how_to_push_it(
    store: ObjectStore, tmp_path: Path
) -> None:
    store.check()  # the bucket exists (a missing bucket is an unavailable store)
    with pytest.raises(ModelNotInStore) as missing:
        pull(store, tmp_path / "models" / NAME)
    message = str(missing.value)
    assert f"{NAME!r} is not in the object store" in message
    assert f"loraplex base-models push DIR --name {NAME}" in message
    assert not (tmp_path / "models" / NAME).exists()


def test_a_push_cut_off_midway_leaves_the_model_missing_not_half_there(
    store: ObjectStore, model_dir: Path, tmp_path: Path
) -> None:
    push_model(store, model_dir, say=quiet)
    (model_dir / "config.json").write_text('{"architectures": []}\n')
    (model_dir / "tokenizer.json").write_bytes(b"a new tokenizer")
    with pytest.raises(StoreUnavailable):  # the second changed file's upload fails
        push_model(FailingUploads(store, allowed=1), model_dir, say=quiet)  # type: ignore[arg-type]
    assert not store.exists(manifest_key(NAME))
    with pytest.raises(ModelNotInStore):
        pull(store, tmp_path / "models" / NAME)


def test_a_repushed_model_pulls_only_what_changed_and_drops_removed_files(
    store: ObjectStore, model_dir: Path, tmp_path: Path
) -> None:
    push_model(store, model_dir, say=quiet)
    dest = tmp_path / "models" / NAME
    pull(store, dest)
    (model_dir / "generation_config.json").write_text('{"eos_token_id": 3}\n')
    (model_dir / "original" / "params.json").unlink()
    repushed = push_model(store, model_dir, say=quiet)
    assert repushed.stale_deleted == 1 and repushed.uploaded_bytes == len('{"eos_token_id": 3}\n')
    report = pull(store, dest)
    assert report.fetched_files == 1 and report.extra == ("original/params.json",)
    assert (dest / "generation_config.json").read_bytes() == b'{"eos_token_id": 3}\n'


def test_pushing_an_unchanged_model_again_uploads_nothing_and_pulls_stay_complete(
    store: ObjectStore, model_dir: Path, tmp_path: Path
) -> None:
    first = push_model(store, model_dir, say=quiet)
    dest = tmp_path / "models" / NAME
    pull(store, dest)
    again = push_model(store, model_dir, say=quiet)
    assert first.uploaded_bytes == first.bytes and again.uploaded_bytes == 0
    assert again.manifest_sha256 == first.manifest_sha256
    assert pull(store, dest).is_skipped


def test_two_pulls_into_one_folder_take_turns_and_fetch_once(
    store: ObjectStore, model_dir: Path, tmp_path: Path
) -> None:
    push_model(store, model_dir, say=quiet)
    dest = tmp_path / "models" / NAME
    start = threading.Barrier(2)
    reports: list[Any] = []

    def one_pull() -> None:
        start.wait()
        reports.append(pull(store, dest))

    threads = [threading.Thread(target=one_pull) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(reports) == 2 and sorted(r.is_skipped for r in reports) == [False, True]
    assert sum(r.fetched_files for r in reports) == len(tree(model_dir))
    assert tree(dest) == tree(model_dir)


def test_a_complete_copy_on_a_read_only_volume_is_used_as_it_is(
    store: ObjectStore, model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    push_model(store, model_dir, NAME, say=quiet)
    dest = tmp_path / "models" / NAME
    pull(store, dest)

    def no_writes(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(f"[Errno 30] Read-only file system: {dest.parent}")

    # A pre-filled volume mounted read-only: the lock file beside it cannot be made (the
    # suite runs as root, for whom a chmod would not stop the write).
    monkeypatch.setattr("loraplex.control.base_models.pull.pull_lock", no_writes)
    report = pull(store, dest)
    assert report.is_skipped and report.fetched_files == 0
