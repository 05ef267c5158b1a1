"""API key secrets: shape, hashing and prefix parsing."""

from __future__ import annotations

from loraplex.auth.secrets import hash_key, matches, mint_key, prefix_of


def test_minted_key_parses_back_to_its_prefix_and_matches_its_hash() -> None:
    key = mint_key()
    assert key.full.startswith("lpx_") and prefix_of(key.full) == key.prefix
    assert matches(key.full, key.secret_hash) and key.full not in key.secret_hash


def test_two_keys_differ() -> None:
    assert mint_key().full != mint_key().full


def test_a_changed_key_does_not_match() -> None:
    key = mint_key()
    assert not matches(key.full[:-1] + ("A" if key.full[-1] != "A" else "B"), key.secret_hash)


def test_malformed_keys_have_no_prefix() -> None:
    for bad in ["", "lpx", "lpx_short_x", "sk-abc", "lpx_0123456789_"]:
        assert prefix_of(bad) is None
    assert hash_key("a") != hash_key("b")
