"""The overload bench's capacity is a Poisson rate that held the SLO twice: in its search
and measured again; its yardstick is an unloaded pass that caught no stall."""

from __future__ import annotations

import pytest

from loraplex.bench import overload
from loraplex.bench.overload import RATE_STEP, Outcome, _confirmed, _unloaded

SLO_MS = 100.0


def _engine_that_holds_up_to(sustained: float, measured: list[float]):
    """A stand-in load: p99 TTFT within the SLO at rates up to `sustained`, 10x over it above."""

    async def open_loop(url, key, rate, seconds, max_tokens, seed=0, logit_bias=None) -> Outcome:
        measured.append(rate)
        ttft_s = 0.05 if rate <= sustained else 1.0
        return Outcome(seconds, ttfts=[ttft_s] * int(rate * seconds))

    return open_loop


def test_a_rate_that_held_by_luck_steps_down_until_one_holds_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    measured: list[float] = []
    monkeypatch.setattr(overload, "open_loop", _engine_that_holds_up_to(10.0, measured))
    rate, out, held = _confirmed("u", "k", 15.0, True, 10.0, 8, SLO_MS, {})
    assert held and rate == pytest.approx(15.0 / RATE_STEP**2)  # 15 -> 12 -> 9.6
    assert out.goodput(SLO_MS) == pytest.approx(9.6)
    assert measured == pytest.approx([15.0, 12.0, 9.6])


def test_a_rate_that_holds_again_is_the_capacity(monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[float] = []
    monkeypatch.setattr(overload, "open_loop", _engine_that_holds_up_to(10.0, measured))
    assert _confirmed("u", "k", 8.0, True, 10.0, 8, SLO_MS, {})[::2] == (8.0, True)
    assert measured == [8.0]


def test_an_unloaded_pass_that_caught_a_stall_is_measured_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    passes = iter([[0.03] * 98 + [0.2] * 2, [0.03] * 99 + [0.045]])  # a stall, then none

    async def closed_loop(url, key, streams, seconds, max_tokens, logit_bias=None) -> Outcome:
        return Outcome(seconds, ttfts=next(passes), steal=0.0)

    monkeypatch.setattr(overload, "closed_loop", closed_loop)
    assert _unloaded("u", "k", 10.0, {}).p(0.99) < 50  # ms; the SLO is twice it
