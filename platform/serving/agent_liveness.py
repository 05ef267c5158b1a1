"""Whether a self-registered engine's agent still heartbeats: the rule, apart from the I/O.

An engine registered by `loraplex agent` carries the time of its agent's last heartbeat
(`engines.agent_seen_at`). Past `stale_after_s` the engine leaves the rotation (its node may
be gone, or cut off); past `forget_after_s` its row is deleted, so engines of pods that came
and went do not pile up. An engine an operator registered has no agent time and is judged by
its health probes alone.
"""

from __future__ import annotations

import enum
from datetime import datetime


class AgentState(enum.StrEnum):
    """What the agent's last heartbeat says about its engine."""

    OPERATOR = "operator"  # registered by hand: no agent to hear from
    FRESH = "fresh"
    STALE = "stale"  # out of rotation until the agent is heard again
    LOST = "lost"  # to be forgotten


def agent_state(
    seen_at: datetime | None, now: datetime, stale_after_s: float, forget_after_s: float
) -> AgentState:
    """The state of an engine whose agent was last heard at `seen_at`."""
    if seen_at is None:
        return AgentState.OPERATOR
    silent_s = (now - seen_at).total_seconds()
    if silent_s > forget_after_s:
        return AgentState.LOST
    if silent_s > stale_after_s:
        return AgentState.STALE
    return AgentState.FRESH
