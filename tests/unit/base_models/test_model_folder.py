"""Reading a model folder for a push: every regular file, nothing that leads out of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loraplex.control.base_models import model_folder
from loraplex.control.base_models.manifest import ManifestError
from loraplex.control.base_models.model_folder import read_model_folder


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A model folder: config, weights and a tokenizer in a subfolder."""
    root = tmp_path / "model"
    (root / "tokenizer").mkdir(parents=True)
    (root / "config.json").write_text("{}")
    (root / "model.safetensors").write_bytes(b"w" * 100)
    (root / "tokenizer" / "tokenizer.json").write_text("{}")
    return root


def test_every_regular_file_is_listed_with_its_relative_path_and_size(folder: Path) -> None:
    contents = read_model_folder(folder)
    assert [(f.path, f.size) for f in contents.files] == [
        ("config.json", 2), ("model.safetensors", 100), ("tokenizer/tokenizer.json", 2),
    ]  # fmt: skip
    assert contents.total_bytes == 104


def test_hidden_files_and_folders_are_left_out_and_named(folder: Path) -> None:
    (folder / ".gitattributes").write_text("*")
    (folder / ".cache" / "huggingface").mkdir(parents=True)
    (folder / ".cache" / "huggingface" / "lock").write_text("")
    contents = read_model_folder(folder)
    assert contents.hidden == (".cache/", ".gitattributes")
    assert all(not f.path.startswith(".") for f in contents.files)


def test_a_symlink_to_a_file_inside_is_pushed_as_that_file(folder: Path) -> None:
    (folder / "alias.json").symlink_to("config.json")
    contents = read_model_folder(folder)
    assert ("alias.json", 2) in [(f.path, f.size) for f in contents.files]


def test_a_symlink_out_of_the_folder_is_refused(folder: Path, tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("s")
    (folder / "leak.txt").symlink_to(tmp_path / "secret")
    with pytest.raises(ManifestError, match=r"leak\.txt is a symlink out"):
        read_model_folder(folder)


def test_a_symlinked_folder_is_refused(folder: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (folder / "linked").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ManifestError, match="linked is a symlinked folder"):
        read_model_folder(folder)


def test_a_fifo_is_refused(folder: Path) -> None:
    os.mkfifo(folder / "pipe")
    with pytest.raises(ManifestError, match="pipe is not a regular file"):
        read_model_folder(folder)


def test_a_name_the_store_cannot_hold_is_refused(folder: Path) -> None:
    (folder / "my weights.bin").write_text("")
    with pytest.raises(ManifestError, match=r"my weights\.bin"):
        read_model_folder(folder)


def test_an_empty_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="holds no files"):
        read_model_folder(tmp_path)


def test_too_many_files_are_refused_before_any_upload(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model_folder, "MAX_FILES", 2)
    with pytest.raises(ManifestError, match="at most 2 files"):
        read_model_folder(folder)


def test_too_many_bytes_are_refused_before_any_upload(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model_folder, "MAX_TOTAL_BYTES", 50)
    with pytest.raises(ManifestError, match="at most 50 bytes"):
        read_model_folder(folder)
