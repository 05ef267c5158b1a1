"""Dispatch order: fair share across tenants, active adapters first, bounded wait."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loraplex.serving.policy import DispatchQueue, Request

WEIGHTS = {"a": 1.0, "b": 2.0, "c": 3.0}


def queue(max_wait_s: float = 1e9) -> DispatchQueue:
    return DispatchQueue(lambda tenant: WEIGHTS[tenant], max_wait_s)


def req(rid: int, tenant: str, version: str, cost: float = 1.0) -> Request:
    return Request(rid, tenant, version, 0.0, cost)


@settings(max_examples=80, deadline=None)
@given(
    backlog=st.lists(st.sampled_from(sorted(WEIGHTS)), min_size=30, max_size=200),
    costs=st.lists(st.floats(0.5, 4.0), min_size=200, max_size=200),
)
def test_backlogged_tenants_get_weighted_shares_within_one_request(
    backlog: list[str], costs: list[float]
) -> None:
    q = queue()
    for rid, tenant in enumerate(backlog):
        q.push(req(rid, tenant, f"{tenant}-adapter", costs[rid]), 0.0)
    served = dict.fromkeys(WEIGHTS, 0.0)
    waiting = {t: backlog.count(t) for t in WEIGHTS}
    while q.size:
        version = q.peek_choice(0.0, can_take_slot=True)
        assert version is not None
        request = q.pop(version)
        served[request.tenant_id] += request.cost
        waiting[request.tenant_id] -= 1
        backlogged = [t for t in WEIGHTS if waiting[t] > 0]
        normalised = [served[t] / WEIGHTS[t] for t in backlogged]
        if len(normalised) > 1:  # start-time fair queueing bound: c_max/w_i + c_max/w_j
            assert max(normalised) - min(normalised) <= 2 * 4.0 / min(WEIGHTS.values()) + 1e-9


def test_requests_for_active_adapters_go_first() -> None:
    q = queue()
    q.push(req(1, "a", "cold-adapter"), 0.0)
    q.push(req(2, "b", "hot-adapter"), 0.0)
    q.set_active("hot-adapter", True)
    assert q.peek_choice(0.0, can_take_slot=True) == "hot-adapter"


def test_no_new_slot_is_taken_when_none_is_free() -> None:
    q = queue()
    q.push(req(1, "a", "needs-a-slot"), 0.0)
    assert q.peek_choice(0.0, can_take_slot=False) is None


def test_a_request_past_the_wait_cap_goes_before_active_ones() -> None:
    q = queue(max_wait_s=5.0)
    q.push(req(1, "a", "starving"), 0.0)
    q.push(req(2, "b", "hot"), 1.0)
    q.set_active("hot", True)
    assert q.peek_choice(2.0, can_take_slot=True) == "hot"
    assert q.peek_choice(6.0, can_take_slot=True) == "starving"


def test_a_starving_request_holds_back_others_until_a_slot_frees() -> None:
    q = queue(max_wait_s=5.0)
    q.push(req(1, "a", "starving"), 0.0)
    q.push(req(2, "b", "hot"), 1.0)
    q.set_active("hot", True)
    assert q.peek_choice(6.0, can_take_slot=False) is None


def test_sglangs_own_order_skips_a_request_that_needs_a_slot_and_never_ages_it() -> None:
    q = DispatchQueue(lambda tenant: WEIGHTS[tenant], max_wait_s=1.0, skip_to_fit=True)
    q.push(req(1, "a", "minority"), 0.0)  # the oldest, but its adapter holds no slot
    q.push(req(2, "b", "popular"), 5.0)
    q.set_active("popular", True)
    # Long past any wait cap, the slots all busy: the popular adapter's request goes by.
    assert q.peek_choice(100.0, can_take_slot=False) == "popular"
    q.pop("popular")
    assert q.peek_choice(100.0, can_take_slot=False) is None
    assert q.peek_choice(100.0, can_take_slot=True) == "minority"  # oldest, once one fits
