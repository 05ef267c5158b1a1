"""`up`'s base model comes through the object store: pushed once, pulled on every run."""

from __future__ import annotations

from pathlib import Path

import pytest

from loraplex.adapters.store import LocalStore
from loraplex.control.base_models.manifest import manifest_key
from loraplex.control.base_models.pull import MARKER_NAME
from loraplex.up import base_model
from loraplex.up.base_model import prepare_base_model
from loraplex.up.layout import BASE_MODEL, Layout


def write_model(folder: Path) -> None:
    """A stand-in for the generated model (the real one needs torch and seconds)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}\n')
    (folder / "model.safetensors").write_bytes(b"weights" * 100)


@pytest.fixture
def generated(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Replace generation with `write_model`; records each folder it generated."""
    made: list[Path] = []

    def generate(layout: Layout) -> Path:
        folder = layout.model_dir.with_name("generated")
        write_model(folder)
        made.append(folder)
        return folder

    monkeypatch.setattr(base_model, "generate_model", generate)
    return made


def test_the_first_run_generates_pushes_and_pulls_into_the_engines_folder(
    tmp_path: Path, generated: list[Path]
) -> None:
    layout, store, said = Layout(tmp_path), LocalStore(tmp_path / "objects"), []
    prepare_base_model(store, layout, said.append)
    assert len(generated) == 1 and not generated[0].exists()
    assert store.exists(manifest_key(BASE_MODEL))
    assert (layout.model_dir / "model.safetensors").read_bytes() == b"weights" * 100
    assert (layout.model_dir / MARKER_NAME).is_file()
    assert any("pushed 2 files" in line for line in said)
    assert any("fetched 2 files" in line for line in said)


def test_a_later_run_neither_generates_nor_fetches(tmp_path: Path, generated: list[Path]) -> None:
    layout, store = Layout(tmp_path), LocalStore(tmp_path / "objects")
    prepare_base_model(store, layout, lambda line: None)
    said: list[str] = []
    prepare_base_model(store, layout, said.append)
    assert len(generated) == 1
    assert said == [line for line in said if "already holds a complete copy" in line] != []


def test_a_model_an_earlier_up_generated_in_place_is_pushed_not_generated_again(
    tmp_path: Path, generated: list[Path]
) -> None:
    layout, store = Layout(tmp_path), LocalStore(tmp_path / "objects")
    write_model(layout.model_dir)
    said: list[str] = []
    prepare_base_model(store, layout, said.append)
    assert generated == [] and store.exists(manifest_key(BASE_MODEL))
    assert any("fetched 0 files" in line and "kept 2 files" in line for line in said)
