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


def test_no_made_key_starts_with_a_dash_which_the_engine_would_take_for_an_option(
    tmp_path: Path,
) -> None:
    """SGLang's argparse refuses `--api-key -x…` ("expected one argument"): a made key that
    began with "-" (one in 64 URL-safe ones did) kept `up`'s engine from ever starting."""
    keys = []
    for run in range(200):
        layout = Layout(tmp_path / str(run))
        keys.append(engine_api_key(layout, ""))
    assert not [key for key in keys if key.startswith("-")]


def test_a_stored_key_that_starts_with_a_dash_is_made_again(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    layout.engine_api_key.parent.mkdir(parents=True, exist_ok=True)
    layout.engine_api_key.write_text("-dash-first")
    key = engine_api_key(layout, "")
    assert not key.startswith("-") and layout.engine_api_key.read_text() == key
