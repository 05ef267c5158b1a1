"""Counting a long prompt: exact when it fits the context, stopped early when it surely does
not, so a megabyte prompt never costs the memory of counting it whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from loraplex.gateway import tokens
from loraplex.serving.engines.launcher import ensure_model

MODEL = Path(__file__).resolve().parents[3] / "var" / "models" / "loraplex-tiny"
TEXT = "The quick brown fox jumps over the lazy dog, again and again. "


@pytest.fixture(scope="module")
def source() -> str:
    ensure_model(MODEL, say=lambda _: None)
    return str(MODEL)


def test_a_prompt_under_the_limit_is_counted_exactly(source: str) -> None:
    prompt = TEXT * 600  # ~37 kB: counted in pieces first, then whole
    whole = tokens.count_prompt_tokens(source, prompt=prompt)
    assert tokens.count_prompt_tokens(source, prompt=prompt, limit=whole + 1) == whole


def test_a_prompt_far_over_the_limit_stops_early_and_says_it_is_over(source: str) -> None:
    prompt = TEXT * 16_000  # ~1 MB
    counted = tokens.count_prompt_tokens(source, prompt=prompt, limit=4096)
    assert counted is not None and counted > 4096
    # it stopped after a piece or two (the suite's 1 MB prompt shows what that saves in RSS)
    assert counted < tokens.count_prompt_tokens(source, prompt=prompt) / 10
