"""How long a self-registered engine's agent may stay silent, and what happens after."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from loraplex.serving.agent_liveness import AgentState, agent_state

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def state(silent_s: float | None) -> AgentState:
    seen = None if silent_s is None else NOW - timedelta(seconds=silent_s)
    return agent_state(seen, NOW, stale_after_s=20, forget_after_s=300)


def test_an_engine_without_an_agent_is_judged_by_its_probes_alone() -> None:
    assert state(None) is AgentState.OPERATOR


def test_a_heard_agent_keeps_its_engine_in_rotation() -> None:
    assert state(0) is AgentState.FRESH and state(20) is AgentState.FRESH


def test_a_silent_agent_takes_its_engine_out_then_it_is_forgotten() -> None:
    assert state(20.5) is AgentState.STALE and state(300) is AgentState.STALE
    assert state(300.5) is AgentState.LOST
