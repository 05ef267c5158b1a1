"""An agent's heartbeat drives its engine's rotation: a drain or a reported outage takes it
out at once, a report of its return brings it back, and the engine row keeps the state."""

from __future__ import annotations

import secrets
from typing import Any

from litestar.testing import AsyncTestClient

from tests.conftest import Api
from tests.integration.control.test_engines_api import ENGINES, Live, live  # noqa: F401
from tests.integration.control.test_node_credentials import (
    AGENTS,
    bearer,
    mint,
    registration,
)


async def heartbeat(
    client: AsyncTestClient, name: str, secret: str, body: dict[str, Any], **state: Any
) -> str:
    """One agent heartbeat with `state`; the engine's id."""
    response = await client.put(f"{AGENTS}/{name}", json={**body, **state}, headers=bearer(secret))
    assert response.status_code == 200, response.text
    return str(response.json()["engine_id"])


async def view(operator: Api, engine_id: str) -> dict[str, Any]:
    """The API's view of the engine."""
    return dict((await operator.get(f"{ENGINES}/{engine_id}")).json())


async def test_a_draining_engine_leaves_rotation_and_a_restart_brings_it_back(
    operator: Api, client: AsyncTestClient, live: Live
) -> None:
    name = f"drain-{secrets.token_hex(3)}"
    secret = (await mint(operator, name))["credential"]
    body = await registration(operator, url=f"http://127.0.0.1:{secrets.randbelow(20000) + 20000}")
    engine_id = await heartbeat(client, name, secret, body, engine_healthy=True)
    await live.registry.poll_once()
    assert (await view(operator, engine_id))["live"]["in_rotation"] is True

    await heartbeat(client, name, secret, body, engine_healthy=True, draining=True)
    drained = await view(operator, engine_id)
    assert (drained["status"], drained["live"]["in_rotation"]) == ("draining", False)
    await live.registry.poll_once()  # its probes answer: still out
    assert (await view(operator, engine_id))["live"]["in_rotation"] is False

    back = {**body, "engine_generation": 1}  # the agent saw it restart: no longer draining
    await heartbeat(client, name, secret, back, engine_healthy=True)
    await live.registry.poll_once()
    assert (await view(operator, engine_id))["live"]["in_rotation"] is True


async def test_an_engine_its_agent_reports_down_leaves_rotation_before_any_probe(
    operator: Api, client: AsyncTestClient, live: Live
) -> None:
    name = f"down-{secrets.token_hex(3)}"
    secret = (await mint(operator, name))["credential"]
    body = await registration(operator, url=f"http://127.0.0.1:{secrets.randbelow(20000) + 20000}")
    engine_id = await heartbeat(client, name, secret, body, engine_healthy=True)
    await live.registry.poll_once()
    assert (await view(operator, engine_id))["live"]["in_rotation"] is True
    await heartbeat(client, name, secret, body, engine_healthy=False)
    assert (await view(operator, engine_id))["live"]["in_rotation"] is False
