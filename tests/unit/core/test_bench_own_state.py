"""A bench keeps its operators, tenants and engines out of the database `loraplex up` serves."""

from __future__ import annotations

from pathlib import Path

import pytest

from loraplex.bench.cli import own_state
from loraplex.settings import Settings


def test_with_the_default_database_a_bench_uses_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = own_state(Settings())
    assert settings.database_url != Settings().database_url
    assert settings.data_dir == Path("var/bench/platform")
    assert (tmp_path / "var/bench/platform").is_dir()


def test_a_database_the_operator_chose_is_kept() -> None:
    chosen = Settings(database_url="postgresql+asyncpg://bench@127.0.0.1/loraplex")
    assert own_state(chosen) == chosen
