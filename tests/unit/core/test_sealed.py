"""Import credentials sealed for the broker: opaque, tamper-evident, bound to the secret."""

from __future__ import annotations

import pytest

from loraplex.auth.sealed import SealBroken, seal, unseal

SECRET = "a-platform-secret-of-enough-length"
SOURCE = {"kind": "s3", "secret_access_key": "wJalrXUtnFEMI/K7MDENG"}


def test_a_sealed_source_opens_with_the_same_secret_and_hides_the_credential() -> None:
    token = seal(SECRET, SOURCE)
    assert "wJalrXUtnFEMI" not in token
    assert unseal(SECRET, token, max_age_s=60) == SOURCE


def test_another_secret_or_a_changed_token_cannot_open_it() -> None:
    token = seal(SECRET, SOURCE)
    with pytest.raises(SealBroken):
        unseal("another-secret", token, max_age_s=60)
    changed = token[:-5] + ("A" if token[-5] != "A" else "B") + token[-4:]
    with pytest.raises(SealBroken):
        unseal(SECRET, changed, max_age_s=60)
