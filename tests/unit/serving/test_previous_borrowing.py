"""The previous gate's borrowing past its cap (the overload scenario's baseline "today")."""

from __future__ import annotations

from loraplex.gateway.admission.fair_share import Claim, fair_shares
from loraplex.serving.simulator.overload.previous_gate.borrowing import may_borrow


def test_a_tenant_below_its_share_borrows_past_the_cap_only_from_one_above_its_own() -> None:
    shares = {"flood": 4.0, "quiet": 4.0}
    assert may_borrow("quiet", {"flood": 7, "quiet": 1}, shares)
    assert not may_borrow("flood", {"flood": 7, "quiet": 1}, shares)
    assert not may_borrow("quiet", {"flood": 4, "quiet": 3}, shares)  # nobody above: wait


def test_with_more_tenants_than_places_nobody_borrows() -> None:
    shares = fair_shares(1, {"a": Claim(1), "b": Claim(1)})
    assert not may_borrow("b", {"a": 1}, shares)
