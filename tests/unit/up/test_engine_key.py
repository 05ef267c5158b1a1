"""`loraplex up` starts its engine behind an API key, and gives the API the same key."""

from __future__ import annotations

import stat
from pathlib import Path

from loraplex.up.engine import engine_api_key, engine_config
from loraplex.up.layout import Layout


def test_a_key_is_made_once_kept_owner_only_and_reused(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    first = engine_api_key(layout, "")
    assert len(first) >= 32
    assert stat.S_IMODE(layout.engine_api_key.stat().st_mode) == 0o600
    assert engine_api_key(layout, "") == first  # a running engine keeps answering to it


def test_a_configured_key_wins_and_nothing_is_written(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert engine_api_key(layout, "from-the-environment") == "from-the-environment"
    assert not layout.engine_api_key.exists()


def test_the_engine_is_started_with_the_key(tmp_path: Path) -> None:
    assert engine_config(Layout(tmp_path), 8200, api_key="k").api_key == "k"


def test_reset_removes_the_key_with_the_engine_state(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    engine_api_key(layout, "")
    assert any(layout.engine_api_key.is_relative_to(p) for p in layout.owned())
