"""LRU, GDSF, decayed LFU and Belady ordering on small hand-written traces."""

import pytest

from loraplex.serving.policy import (
    DEFAULT_EVICTION,
    BeladyPolicy,
    DecayedLfuPolicy,
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


def test_dlfu_keeps_a_frequently_used_entry_over_a_one_hit_entry() -> None:
    dlfu = DecayedLfuPolicy()
    dlfu.on_insert("hot", 1.0, now=0.0)
    for t in (10.0, 20.0, 30.0):  # its heat grows with each use
        dlfu.on_access("hot", 1.0 + t / 10, now=t)
    dlfu.on_insert("one-hit", 1.0, now=40.0)  # newer, but seen once
    assert dlfu.choose_victim(always) == "one-hit"


def test_dlfu_lets_a_formerly_hot_entry_age_out_after_a_shift() -> None:
    dlfu = DecayedLfuPolicy(age_half_life_s=100.0)
    dlfu.on_insert("was-hot", 8.0, now=0.0)  # hot, then never asked for again
    dlfu.on_insert("now-warm", 1.0, now=400.0)  # 4 half-lives later: 8 / 2**4 < 1
    assert dlfu.choose_victim(always) == "was-hot"


def test_dlfu_keeps_a_hot_entry_within_its_half_life() -> None:
    dlfu = DecayedLfuPolicy(age_half_life_s=100.0)
    dlfu.on_insert("hot", 8.0, now=0.0)
    dlfu.on_insert("warm", 1.0, now=200.0)  # 2 half-lives: 8 / 4 > 1
    assert dlfu.choose_victim(always) == "warm"


def test_dlfu_victim_taken_out_of_order_leaves_the_rest_in_order() -> None:
    dlfu = DecayedLfuPolicy()
    for key, value in (("cold", 1.0), ("warm", 2.0), ("hot", 3.0)):
        dlfu.on_insert(key, value)
    assert dlfu.choose_victim(lambda key: key == "hot", in_order=False) == "hot"
    assert dlfu.choose_victim(always) == "cold"


def test_dlfu_forgets_removed_entries() -> None:
    dlfu = DecayedLfuPolicy()
    dlfu.on_insert("gone", 1.0)
    dlfu.on_insert("kept", 2.0)
    dlfu.on_remove("gone")
    assert dlfu.choose_victim(always) == "kept"


def test_dlfu_counts_loads_on_disk_and_is_the_default() -> None:
    assert DecayedLfuPolicy.disk_value == "loads"
    assert GdsfPolicy.disk_value == "reload_s"
    assert DEFAULT_EVICTION == "dlfu"


def test_policies_return_none_when_everything_is_protected() -> None:
    for policy in (LruPolicy(), GdsfPolicy(), DecayedLfuPolicy()):
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
    assert make_eviction_policy("dlfu").name == "dlfu"


def test_registry_refuses_belady_without_a_future_and_unknown_names() -> None:
    with pytest.raises(ValueError, match="future"):
        make_eviction_policy("belady")
    with pytest.raises(ValueError, match="unknown"):
        make_eviction_policy("mru")
