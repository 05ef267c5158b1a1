"""The node-credential rule: the secret must match, be live, and name the engine asked for."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from loraplex.auth.node_credentials import (
    NODE_BRAND,
    bearer_of,
    check_node_credential,
    mint_node_secret,
)
from loraplex.db.models import NodeCredential
from loraplex.errors import Forbidden, Unauthenticated


def credential(engine_name: str = "node-a") -> tuple[str, NodeCredential]:
    """A fresh secret and the row the database would hold for it."""
    new = mint_node_secret()
    row = NodeCredential(engine_name=engine_name, prefix=new.prefix, secret_hash=new.secret_hash)
    return new.full, row


def test_a_minted_secret_is_branded_and_stored_only_as_a_hash() -> None:
    secret, row = credential()
    assert secret.startswith(f"{NODE_BRAND}_{row.prefix}_")
    assert secret not in row.secret_hash and len(row.secret_hash) == 64


def test_the_holder_passes_for_its_own_engine() -> None:
    secret, row = credential("node-a")
    assert check_node_credential(row, secret, "node-a") is row


def test_another_engines_name_is_forbidden_and_named() -> None:
    secret, row = credential("node-a")
    with pytest.raises(Forbidden, match="for engine 'node-a', not 'node-b'"):
        check_node_credential(row, secret, "node-b")


def test_a_wrong_secret_with_a_real_prefix_is_unknown() -> None:
    secret, row = credential()
    with pytest.raises(Unauthenticated, match="unknown node credential"):
        check_node_credential(row, secret + "x", "node-a")


def test_no_row_is_unknown() -> None:
    with pytest.raises(Unauthenticated, match="unknown node credential"):
        check_node_credential(None, "lpxnode_0123456789_x", "node-a")


def test_a_revoked_credential_is_refused_even_for_its_engine() -> None:
    secret, row = credential()
    row.revoked_at = datetime.now(UTC)
    with pytest.raises(Unauthenticated, match="revoked"):
        check_node_credential(row, secret, "node-a")


@pytest.mark.parametrize("header", ["", "Bearer ", "Basic abc", "abc"])
def test_a_request_without_a_bearer_token_is_a_401(header: str) -> None:
    with pytest.raises(Unauthenticated, match="missing node credential"):
        bearer_of({"authorization": header})
