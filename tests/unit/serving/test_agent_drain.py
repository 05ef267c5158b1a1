"""The agent's /drain: told to the API at once, answered once the engine idles, node only."""

from __future__ import annotations

import httpx
import pytest

from loraplex.serving.agent_app import create_agent_app
from loraplex.serving.agent_drain import Drainer
from loraplex.serving.disk_cache import DiskCache
from loraplex.serving.engines import EngineLoad
from loraplex.serving.live import LocalOps
from loraplex.serving.registry import EngineHandle
from tests.unit.serving.test_agent_registration import Fake, registrar


class Busy:
    """Queue gauges that read `running` for a few reads, then 0."""

    def __init__(self, running: int, reads: int) -> None:
        self.running, self.reads = running, reads

    async def __call__(self) -> EngineLoad:
        self.reads -= 1
        return EngineLoad(running=float(self.running if self.reads >= 0 else 0), waiting=0.0)


async def test_drain_tells_the_api_first_then_waits_for_the_engine_to_idle(
    node_engine: EngineHandle,
) -> None:
    fake = Fake()
    agent = registrar(fake)
    await agent.beat()
    node_engine.driver.queue_depth = Busy(running=2, reads=3)  # type: ignore[method-assign]
    outcome = await Drainer(node_engine, agent, poll_s=0.001).drain(wait_s=30)
    assert outcome.drained and outcome.announced and outcome.in_flight == 0
    assert fake.calls[-1][2]["draining"] is True  # the heartbeat that announced it
    assert fake.calls[-1][2]["engine_healthy"] is True


async def test_drain_gives_up_after_wait_s_with_requests_still_in_flight(
    node_engine: EngineHandle,
) -> None:
    node_engine.driver.queue_depth = Busy(running=1, reads=10**6)  # type: ignore[method-assign]
    outcome = await Drainer(node_engine, None, poll_s=0.001).drain(wait_s=0.05)
    assert not outcome.drained and outcome.in_flight == 1 and not outcome.announced


async def test_a_restarted_engine_is_no_longer_draining() -> None:
    fake = Fake()
    agent = registrar(fake)
    await agent.beat()
    await agent.start_draining()
    fake.engine_up = False
    await agent.beat()
    assert fake.calls[-1][2]["engine_healthy"] is False
    fake.engine_up = True
    await agent.beat()
    assert fake.calls[-1][2]["draining"] is False
    assert fake.calls[-1][2]["engine_generation"] == 1


@pytest.fixture
def app_for(node_engine: EngineHandle, node_cache: DiskCache):  # type: ignore[no-untyped-def]
    def make() -> object:
        return create_agent_app(
            node_engine, LocalOps(node_cache), token="api-token", node_credential="node-cred"
        )

    return make


async def _drain(app: object, client_host: str, headers: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, client=(client_host, 5000))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://agent") as http:
        return await http.post("/drain?wait_s=0", headers=headers)


async def test_drain_is_taken_from_loopback_without_a_token(app_for) -> None:  # type: ignore[no-untyped-def]
    response = await _drain(app_for(), "127.0.0.1", {})
    assert response.status_code == 200, response.text
    assert set(response.json()) == {"drained", "announced", "in_flight", "waited_s"}


async def test_drain_from_another_host_needs_the_nodes_own_credential(app_for) -> None:  # type: ignore[no-untyped-def]
    app = app_for()
    assert (await _drain(app, "10.0.0.9", {})).status_code == 403
    api = {"Authorization": "Bearer api-token"}  # the API's token loads adapters, not drains
    assert (await _drain(app, "10.0.0.9", api)).status_code == 403
    node = {"Authorization": "Bearer node-cred"}
    assert (await _drain(app, "10.0.0.9", node)).status_code == 200


async def test_a_draining_agent_deregisters_only_once_its_engine_is_idle(
    node_engine: EngineHandle, node_cache: DiskCache
) -> None:
    fake = Fake()
    agent = registrar(fake)
    await agent.beat()
    await agent.start_draining()
    busy = Busy(running=1, reads=3)
    node_engine.driver.queue_depth = busy  # type: ignore[method-assign]
    app = create_agent_app(node_engine, LocalOps(node_cache), registrar=agent)
    async with app.lifespan():
        pass  # started, then shut down (SIGTERM to the pod)
    assert busy.reads < 0  # read busy, then idle, before the DELETE went out
    assert fake.calls[-1][0] == "DELETE"
