"""The pull planner: what a pull fetches, keeps or trusts, from the manifest and the folder."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from loraplex.control.base_models.manifest import Manifest, ManifestFile
from loraplex.control.base_models.pull_plan import (
    LocalFile,
    Marker,
    is_complete_copy,
    plan_pull,
    to_hash,
)

SHA = "ab" * 32


def sha(text: str) -> str:
    """A sha256 to stand for a file's content."""
    return hashlib.sha256(text.encode()).hexdigest()


MANIFEST = Manifest(
    "m",
    (
        ManifestFile("config.json", 10, sha("config")),
        ManifestFile("model.safetensors", 1000, sha("weights")),
        ManifestFile("tokenizer/tokenizer.json", 50, sha("tokenizer")),
    ),
)
RIGHT = {f.path: LocalFile(f.size, f.sha256) for f in MANIFEST.files}
SIZES_ONLY = {f.path: LocalFile(f.size) for f in MANIFEST.files}


def test_an_empty_folder_fetches_every_file() -> None:
    plan = plan_pull(MANIFEST, {})
    assert plan.fetch == MANIFEST.files and plan.keep == ()
    assert plan.bytes_to_fetch == MANIFEST.total_bytes


def test_a_folder_with_every_file_right_fetches_nothing() -> None:
    plan = plan_pull(MANIFEST, RIGHT)
    assert plan.fetch == () and plan.keep == MANIFEST.files
    assert plan.bytes_kept == MANIFEST.total_bytes


def test_a_truncated_file_is_fetched_again_without_being_hashed() -> None:
    local = {**SIZES_ONLY, "model.safetensors": LocalFile(400)}
    assert "model.safetensors" not in {f.path for f in to_hash(MANIFEST, local)}
    plan = plan_pull(MANIFEST, {**RIGHT, "model.safetensors": LocalFile(400)})
    assert [f.path for f in plan.fetch] == ["model.safetensors"]


def test_a_file_of_the_right_size_but_other_bytes_is_fetched_again() -> None:
    plan = plan_pull(MANIFEST, {**RIGHT, "config.json": LocalFile(10, sha("other"))})
    assert [f.path for f in plan.fetch] == ["config.json"]
    assert len(plan.keep) == 2


def test_only_files_of_the_right_size_are_hashed() -> None:
    local = {"config.json": LocalFile(10), "model.safetensors": LocalFile(3)}
    assert [f.path for f in to_hash(MANIFEST, local)] == ["config.json"]


def test_files_the_manifest_does_not_list_are_reported_as_extra() -> None:
    plan = plan_pull(MANIFEST, {**RIGHT, "old-shard.safetensors": LocalFile(5)})
    assert plan.extra == ("old-shard.safetensors",) and plan.fetch == ()


def test_the_marker_of_this_manifest_with_every_size_right_is_a_complete_copy() -> None:
    assert is_complete_copy(MANIFEST, SHA, Marker("m", SHA), SIZES_ONLY)


def test_without_a_marker_the_copy_is_not_trusted() -> None:
    assert not is_complete_copy(MANIFEST, SHA, None, SIZES_ONLY)


def test_a_marker_of_another_manifest_is_not_trusted() -> None:
    assert not is_complete_copy(MANIFEST, SHA, Marker("m", "cd" * 32), SIZES_ONLY)
    assert not is_complete_copy(MANIFEST, SHA, Marker("other", SHA), SIZES_ONLY)


def test_a_marker_does_not_hide_a_missing_or_resized_file() -> None:
    missing = {k: v for k, v in SIZES_ONLY.items() if k != "config.json"}
    assert not is_complete_copy(MANIFEST, SHA, Marker("m", SHA), missing)
    resized = {**SIZES_ONLY, "config.json": LocalFile(11)}
    assert not is_complete_copy(MANIFEST, SHA, Marker("m", SHA), resized)


local_states = st.dictionaries(
    st.sampled_from([f.path for f in MANIFEST.files] + ["extra.bin"]),
    st.builds(LocalFile, st.integers(0, 1001), st.sampled_from([None, sha("config"), SHA])),
)


@given(local_states)
def test_every_listed_file_is_kept_or_fetched_once_and_kept_only_when_right(
    local: dict[str, LocalFile],
) -> None:
    plan = plan_pull(MANIFEST, local)
    assert sorted(f.path for f in plan.fetch + plan.keep) == sorted(f.path for f in MANIFEST.files)
    for entry in plan.keep:
        assert local[entry.path] == LocalFile(entry.size, entry.sha256)
    assert set(plan.extra) == set(local) - {f.path for f in MANIFEST.files}
