"""Places on the engines are split by plan weight, within each tenant's concurrency bound."""

from __future__ import annotations

import math

import pytest

from loraplex.gateway.admission.fair_share import (
    Claim,
    fair_shares,
    neediest,
    weight_of,
)


def test_equal_tenants_split_the_places_equally() -> None:
    assert fair_shares(8, {"a": Claim(1), "b": Claim(1)}) == {"a": 4, "b": 4}


def test_a_higher_priority_plan_gets_a_larger_share() -> None:
    shares = fair_shares(9, {"free": Claim(weight_of(0)), "ent": Claim(weight_of(2))})
    assert shares["ent"] == pytest.approx(4 * shares["free"])


def test_a_tenant_with_a_larger_request_quota_gets_a_larger_share() -> None:
    """A flood from a tenant sold 60 requests a minute does not get as many places as a
    tenant on the same plan sold 600."""
    small, large = Claim(weight_of(1, requests_per_minute=60)), Claim(weight_of(1, 600))
    shares = fair_shares(7, {"flood": small, "quiet": large})
    assert shares["quiet"] == pytest.approx(10 * shares["flood"])


def test_the_request_quota_counts_within_the_free_to_enterprise_range() -> None:
    """No quota weighs like the largest, a quota of 0 like the smallest, and a huge one no
    more than the enterprise plan's: one tenant's override cannot take a whole engine."""
    assert weight_of(1, None) == weight_of(1, 6000) == weight_of(1, 100_000) == 20.0
    assert weight_of(1, 0) == weight_of(1, 60) == weight_of(1, 1) == pytest.approx(0.2)
    assert [weight_of(p, rpm) for p, rpm in ((0, 60), (1, 600), (2, 6000))] == pytest.approx(
        [0.1, 2.0, 40.0]
    )


def test_what_a_bounded_tenant_cannot_use_goes_to_the_others() -> None:
    shares = fair_shares(10, {"a": Claim(1, bound=1), "b": Claim(1), "c": Claim(1)})
    assert shares == {"a": 1, "b": 4.5, "c": 4.5}
    assert math.fsum(shares.values()) == 10


def test_a_freed_place_goes_to_the_tenant_furthest_below_its_share() -> None:
    shares = {"a": 2.0, "b": 6.0}
    assert neediest(["a", "b"], {"a": 1, "b": 2}, shares) == "b"  # 2/6 < 1/2
