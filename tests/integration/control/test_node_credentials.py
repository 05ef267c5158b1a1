"""Per-node agent credentials: an operator mints one for one engine name, shown once; the
agent that holds it may register, heartbeat and deregister that engine and no other."""

from __future__ import annotations

import secrets
from typing import Any

from litestar.testing import AsyncTestClient

from tests.conftest import Api
from tests.support.adapter_api import ensure_tiny_base

CREDENTIALS = "/api/v1/node-credentials"
AGENTS = "/api/v1/agents/engines"


def engine_name() -> str:
    """A fresh engine name."""
    return f"node-{secrets.token_hex(3)}"


async def mint(operator: Api, name: str) -> dict[str, Any]:
    """Mint a credential for `name`; return the answer (with the secret)."""
    response = await operator.post(CREDENTIALS, json={"engine_name": name})
    assert response.status_code == 201, response.text
    return dict(response.json())


async def registration(operator: Api, url: str = "http://127.0.0.1:1") -> dict[str, Any]:
    """What an agent PUTs for its engine."""
    base = await ensure_tiny_base(operator)
    return {"url": url, "kind": "vllm", "base_model": base, "agent_url": "http://127.0.0.1:2"}


def bearer(secret: str) -> dict[str, str]:
    """Authorization with `secret`."""
    return {"Authorization": f"Bearer {secret}"}


async def test_the_secret_is_shown_once_and_only_a_hash_is_kept(operator: Api) -> None:
    created = await mint(operator, engine_name())
    assert created["credential"].startswith(f"lpxnode_{created['prefix']}_")
    listed = (await operator.get(CREDENTIALS, params={"page_size": 100})).json()["items"]
    mine = next(c for c in listed if c["id"] == created["id"])
    assert "credential" not in mine and created["credential"] not in str(listed)


async def test_a_tenant_key_cannot_mint_a_node_credential(make_tenant) -> None:
    tenant = await make_tenant()
    response = await tenant.api.post(CREDENTIALS, json={"engine_name": engine_name()})
    assert response.status_code == 403


async def test_an_engine_name_the_registry_would_refuse_is_a_400(operator: Api) -> None:
    response = await operator.post(CREDENTIALS, json={"engine_name": "Not A Name"})
    assert response.status_code == 400


async def test_a_node_registers_heartbeats_and_deregisters_its_own_engine(
    operator: Api, client: AsyncTestClient
) -> None:
    name = engine_name()
    secret = (await mint(operator, name))["credential"]
    body = await registration(operator)
    first = await client.put(f"{AGENTS}/{name}", json=body, headers=bearer(secret))
    assert first.status_code == 200, first.text
    again = await client.put(f"{AGENTS}/{name}", json=body, headers=bearer(secret))
    assert again.status_code == 200 and again.json()["engine_id"] == first.json()["engine_id"]
    gone = await client.delete(f"{AGENTS}/{name}", headers=bearer(secret))
    assert gone.status_code == 204


async def test_a_node_cannot_change_another_engines_url(
    operator: Api, client: AsyncTestClient
) -> None:
    victim, intruder = engine_name(), engine_name()
    victim_secret = (await mint(operator, victim))["credential"]
    intruder_secret = (await mint(operator, intruder))["credential"]
    body = await registration(operator, url="http://127.0.0.1:1")
    assert (await client.put(f"{AGENTS}/{victim}", json=body,
                             headers=bearer(victim_secret))).status_code == 200  # fmt: skip
    hijack = {**body, "url": "http://attacker.example:8000"}
    refused = await client.put(f"{AGENTS}/{victim}", json=hijack, headers=bearer(intruder_secret))
    assert refused.status_code == 403
    assert f"for engine '{intruder}', not '{victim}'" in refused.json()["detail"]
    engines = (await operator.get("/api/v1/engines", params={"page_size": 100})).json()["items"]
    assert next(e for e in engines if e["name"] == victim)["url"] == "http://127.0.0.1:1"
    deregister = await client.delete(f"{AGENTS}/{victim}", headers=bearer(intruder_secret))
    assert deregister.status_code == 403
    await client.delete(f"{AGENTS}/{victim}", headers=bearer(victim_secret))


async def test_a_node_cannot_register_a_name_it_was_not_given(
    operator: Api, client: AsyncTestClient
) -> None:
    secret = (await mint(operator, engine_name()))["credential"]
    rogue = engine_name()
    body = await registration(operator)
    response = await client.put(f"{AGENTS}/{rogue}", json=body, headers=bearer(secret))
    assert response.status_code == 403
    engines = (await operator.get("/api/v1/engines", params={"page_size": 100})).json()["items"]
    assert rogue not in {e["name"] for e in engines}


async def test_a_revoked_credential_is_refused_at_the_next_heartbeat(
    operator: Api, client: AsyncTestClient
) -> None:
    name = engine_name()
    created = await mint(operator, name)
    body = await registration(operator)
    headers = bearer(created["credential"])
    assert (await client.put(f"{AGENTS}/{name}", json=body, headers=headers)).status_code == 200
    revoked = await operator.delete(f"{CREDENTIALS}/{created['id']}")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    refused = await client.put(f"{AGENTS}/{name}", json=body, headers=headers)
    assert refused.status_code == 401 and "revoked" in refused.json()["detail"]


async def test_agent_routes_take_no_other_credential(
    operator: Api, operator_key: str, client: AsyncTestClient
) -> None:
    name = engine_name()
    body = await registration(operator)
    for headers in ({}, bearer("the-old-shared-agent-token"), bearer(operator_key),
                    bearer(f"lpxnode_{'0' * 10}_guess")):  # fmt: skip
        response = await client.put(f"{AGENTS}/{name}", json=body, headers=headers)
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"] == "Bearer"
