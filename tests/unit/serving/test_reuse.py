"""Per-tenant reuse: what tells a scanning tenant from a heavy one warming up."""

from loraplex.serving.policy.reuse import TenantReuse


def test_a_tenant_whose_requests_mostly_miss_is_named() -> None:
    reuse = TenantReuse(half_life_s=600.0)
    for i in range(10):
        reuse.record("scanner", hit=i % 5 == 0, now=float(i))
    assert reuse.mostly_misses("scanner")


def test_a_tenant_whose_requests_mostly_hit_is_not_named() -> None:
    reuse = TenantReuse(half_life_s=600.0)
    for i in range(10):
        reuse.record("heavy", hit=i % 5 != 0, now=float(i))
    assert not reuse.mostly_misses("heavy")


def test_recent_requests_outweigh_old_ones() -> None:
    reuse = TenantReuse(half_life_s=60.0)
    for i in range(10):
        reuse.record("tenant", hit=False, now=float(i))
    for i in range(4):  # ten misses ten minutes ago weigh less than four hits now
        reuse.record("tenant", hit=True, now=600.0 + i)
    assert not reuse.mostly_misses("tenant")


def test_an_unknown_tenant_is_not_named() -> None:
    assert not TenantReuse(half_life_s=600.0).mostly_misses("nobody")
