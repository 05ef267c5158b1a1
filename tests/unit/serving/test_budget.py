"""Per-tenant cold-load budgets."""

from loraplex.serving.policy import ColdLoadBudget


def budget(per_minute: float | None, burst: int) -> ColdLoadBudget:
    return ColdLoadBudget(lambda tenant: per_minute if tenant == "limited" else None, burst)


def test_a_tenant_may_burst_then_waits_for_its_rate() -> None:
    b = budget(60.0, burst=3)
    starts = [b.reserve("limited", 0.0) for _ in range(5)]
    assert starts[:4] == [0.0, 0.0, 0.0, 0.0]
    assert starts[4] == 1.0  # one load a second at 60/min


def test_unlimited_tenants_are_never_held() -> None:
    b = budget(60.0, burst=0)
    assert all(b.reserve("other", 0.0) == 0.0 for _ in range(100))


def test_the_budget_refills_with_time() -> None:
    b = budget(60.0, burst=0)
    b.reserve("limited", 0.0)
    assert not b.would_allow("limited", 0.5)
    assert b.would_allow("limited", 1.0)
