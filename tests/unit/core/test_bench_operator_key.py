"""The benches make their own operator key: on a fresh clone's database that must work too."""

from __future__ import annotations

from pathlib import Path

from loraplex.bench.api import operator_key
from loraplex.settings import Settings


def test_a_bench_on_a_database_nobody_migrated_migrates_it_first(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}")
    assert operator_key(settings).startswith("lpx_")
