"""LRU, GDSF and Belady ordering on small hand-written traces."""

import pytest

from loraplex.serving.policy import (
    BeladyPolicy,
    GdsfPolicy,
    LruPolicy,
    make_eviction_policy,
)


def always(_: str) -> bool:
    return True


def test_lru_evicts_the_least_recently_used_entry() -> None:
    lru = LruPolicy()
    for key in ("a", "b", "c"):
        lru.on_insert(key, 1.0)
    lru.on_access("a", 1.0)
    assert lru.choose_victim(always) == "b"


def test_gdsf_keeps_a_hot_entry_that_lru_would_evict() -> None:
    gdsf = GdsfPolicy()
    lru = LruPolicy()
    gdsf.on_insert("hot", 50.0)  # used often and expensive to reload
    lru.on_insert("hot", 50.0)
    for key in ("scan1", "scan2"):
        gdsf.on_insert(key, 1.0)
        lru.on_insert(key, 1.0)
    assert lru.choose_victim(always) == "hot"
    assert gdsf.choose_victim(always) == "scan1"


def test_gdsf_ages_entries_that_stop_being_used() -> None:
    gdsf = GdsfPolicy()
    gdsf.on_insert("old", 5.0)
    for i in range(10):  # each victim raises the floor L that new entries start from
        gdsf.on_insert(f"new{i}", 1.0)
        gdsf.choose_victim(lambda key: key != "old")
    gdsf.on_insert("fresh", 1.0)
    assert gdsf.choose_victim(always) == "old"


def test_gdsf_victim_taken_out_of_order_does_not_age_the_rest() -> None:
    gdsf = GdsfPolicy()
    gdsf.on_insert("hot", 3.0)
    gdsf.on_insert("scan", 5.0)
    assert gdsf.choose_victim(lambda key: key == "scan", in_order=False) == "scan"
    gdsf.on_insert("one-off", 1.0)  # enters at L + 1: below "hot" only if L stayed put
    assert gdsf.choose_victim(always) == "one-off"


def test_gdsf_skips_protected_entries_and_keeps_them() -> None:
    gdsf = GdsfPolicy()
    gdsf.on_insert("busy", 1.0)
    gdsf.on_insert("idle", 2.0)
    assert gdsf.choose_victim(lambda key: key != "busy") == "idle"
    assert gdsf.choose_victim(always) == "busy"


def test_policies_return_none_when_everything_is_protected() -> None:
    for policy in (LruPolicy(), GdsfPolicy()):
        policy.on_insert("pinned", 1.0)
        assert policy.choose_victim(lambda _: False) is None


def test_belady_evicts_the_entry_needed_last() -> None:
    next_use = {"soon": 1.0, "later": 9.0, "never": float("inf")}
    belady = BeladyPolicy(next_use.__getitem__)
    for key in next_use:
        belady.on_insert(key, 0.0)
    assert belady.choose_victim(always) == "never"
    assert belady.choose_victim(always) == "later"


def test_registry_builds_policies_by_name() -> None:
    assert make_eviction_policy("lru").name == "lru"
    assert make_eviction_policy("gdsf").name == "gdsf"


def test_registry_refuses_belady_without_a_future_and_unknown_names() -> None:
    with pytest.raises(ValueError, match="future"):
        make_eviction_policy("belady")
    with pytest.raises(ValueError, match="unknown"):
        make_eviction_policy("mru")
