"""Manifests and names: what a push writes and a pull accepts, and what each refuses."""

from __future__ import annotations

import msgspec
import pytest

from loraplex.control.base_models.manifest import (
    MAX_MANIFEST_BYTES,
    Manifest,
    ManifestError,
    ManifestFile,
    check_model_name,
    check_relative_path,
    decode_manifest,
    encode_manifest,
    file_key,
    manifest_key,
)
from loraplex.control.base_models.service import ModelName

SHA = "ab" * 32
NAMES = ["Llama-3.1-8B-Instruct", "loraplex-tiny", "a", "m_1.2", "x" * 200]
BAD_NAMES = ["", "-lead", ".hidden", "a/b", "a b", "x" * 201, "name\n", "..", "é"]


@pytest.mark.parametrize("name", NAMES + BAD_NAMES)
def test_a_name_is_accepted_exactly_when_base_model_registration_accepts_it(name: str) -> None:
    try:
        msgspec.convert(name, ModelName)
        registrable = True
    except msgspec.ValidationError:
        registrable = False
    try:
        check_model_name(name)
        pushable = True
    except ManifestError:
        pushable = False
    assert pushable == registrable == (name in NAMES)


def test_keys_put_the_manifest_beside_the_files_folder() -> None:
    assert manifest_key("m") == "base-models/m/manifest.json"
    assert file_key("m", "sub/tokenizer.json") == "base-models/m/files/sub/tokenizer.json"


@pytest.mark.parametrize("path", ["../etc/passwd", "a/../b", ".cache/x", "/abs", "a//b", "a b"])
def test_unsafe_relative_paths_are_refused(path: str) -> None:
    with pytest.raises(ManifestError):
        check_relative_path(path)


def test_a_manifest_round_trips_sorted_by_path() -> None:
    manifest = Manifest("m", (ManifestFile("z.json", 1, SHA), ManifestFile("a.json", 2, SHA)))
    back = decode_manifest(encode_manifest(manifest), "m")
    assert [f.path for f in back.files] == ["a.json", "z.json"] and back.total_bytes == 3


def manifest_json(**fields: object) -> bytes:
    """A manifest document with some fields replaced."""
    body = {"name": "m", "format": 1, "files": [{"path": "a", "size": 1, "sha256": SHA}]}
    return msgspec.json.encode({**body, **fields})


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"not json", "not JSON"),
        (manifest_json(name="other"), "names 'other'"),
        (manifest_json(format=2), "format 2"),
        (manifest_json(files=[{"path": "../x", "size": 1, "sha256": SHA}]), "'../x'"),
        (manifest_json(files=[{"path": "a", "size": -1, "sha256": SHA}]), "not valid"),
        (manifest_json(files=[{"path": "a", "size": 1, "sha256": "xyz"}]), "not valid"),
        (manifest_json(files=[{"path": "a", "size": 1, "sha256": SHA}] * 2), "twice"),
        (
            manifest_json(
                files=[
                    {"path": "a", "size": 1, "sha256": SHA},
                    {"path": "a/b", "size": 1, "sha256": SHA},
                ]
            ),
            "inside the file 'a'",
        ),
        (b" " * (MAX_MANIFEST_BYTES + 1), "over"),
    ],
)
def test_a_bad_manifest_is_refused_with_what_is_wrong(data: bytes, says: str) -> None:
    with pytest.raises(ManifestError, match=says):
        decode_manifest(data, "m")
