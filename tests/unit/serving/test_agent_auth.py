"""The node agent asks for the shared token, the API side sends it, and without a token the
agent serves loopback only."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from click.testing import CliRunner
from litestar.testing import AsyncTestClient

from loraplex.serving.agent_app import AgentExposed, check_bind, create_agent_app
from loraplex.serving.agent_cli import agent as agent_command
from loraplex.serving.disk_cache import DiskCache
from loraplex.serving.engines import EngineError
from loraplex.serving.live import AgentOps, LocalOps, OpsRouter
from loraplex.serving.policy import Tier
from loraplex.serving.registry import EngineHandle
from loraplex.settings import Settings
from tests.support.fake_driver import FakeDriver
from tests.support.live_cluster import BASE, Cluster, name_of

TOKEN = "agent-s3cret"
AGENT_URL = "http://agent.local"


@pytest.fixture
async def agent(node_engine: EngineHandle, node_cache: DiskCache) -> AsyncIterator[AsyncTestClient]:
    """The agent app with a token, in-process."""
    app = create_agent_app(node_engine, LocalOps(node_cache), token=TOKEN)
    async with AsyncTestClient(app, base_url=AGENT_URL) as client:
        yield client


def via(agent: AsyncTestClient) -> httpx.AsyncClient:
    """An HTTP client reaching the in-process agent."""
    transport = httpx.ASGITransport(app=agent.app)  # type: ignore[arg-type]
    return httpx.AsyncClient(base_url=AGENT_URL, transport=transport)


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/adapters"), ("POST", "/load"), ("POST", "/unload")]
)
async def test_agent_refuses_requests_without_the_token(
    agent: AsyncTestClient, method: str, path: str
) -> None:
    response = await agent.request(method, path, json={})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("header", [f"Bearer {TOKEN}x", "Bearer ", f"Basic {TOKEN}", TOKEN])
async def test_agent_refuses_a_wrong_token(agent: AsyncTestClient, header: str) -> None:
    response = await agent.get("/adapters", headers={"Authorization": header})
    assert response.status_code == 401


async def test_agent_serves_a_request_with_the_token(agent: AsyncTestClient) -> None:
    response = await agent.get("/adapters", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response.json()["adapters"] == []


async def test_agent_ops_send_the_token(
    cluster: Cluster, agent: AsyncTestClient, node_engine: EngineHandle
) -> None:
    version = cluster.version()
    ops = AgentOps(AGENT_URL, http=via(agent), token=TOKEN)
    assert await ops.load(node_engine, version) is Tier.COLD
    assert name_of(version) in node_engine.driver.adapters  # type: ignore[attr-defined]
    await ops.aclose()


async def test_agent_ops_without_the_token_are_refused(
    cluster: Cluster, agent: AsyncTestClient, node_engine: EngineHandle
) -> None:
    ops = AgentOps(AGENT_URL, http=via(agent))
    with pytest.raises(EngineError, match="agent token"):
        await ops.load(node_engine, cluster.version())
    await ops.aclose()


async def test_the_ops_router_gives_its_agents_the_token(
    cluster: Cluster, agent: AsyncTestClient, node_engine: EngineHandle
) -> None:
    router = OpsRouter(LocalOps(cluster.cache), agent_token=TOKEN)
    handle = EngineHandle("n1", "n1", "http://node-engine", "vllm", BASE, 64, 1, 2, FakeDriver())
    handle.agent_url = AGENT_URL
    ops = router.for_engine(handle)
    assert isinstance(ops, AgentOps)
    await ops.aclose()
    ops._http = via(agent)  # the router's own client, pointed at the in-process agent
    await ops.load(handle, cluster.version())
    await router.aclose()


def test_the_token_is_read_from_the_environment() -> None:
    assert Settings.from_env({"LORAPLEX_AGENT_TOKEN": TOKEN}).agent_token == TOKEN


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_without_a_token_the_agent_may_serve_loopback(host: str) -> None:
    check_bind(host, "")


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "agent.internal"])
def test_without_a_token_the_agent_refuses_other_addresses(host: str) -> None:
    with pytest.raises(AgentExposed, match="LORAPLEX_AGENT_TOKEN"):
        check_bind(host, "")


def test_with_a_token_the_agent_may_serve_any_address() -> None:
    check_bind("0.0.0.0", TOKEN)


def test_the_agent_command_refuses_to_start_exposed_without_a_token() -> None:
    result = CliRunner().invoke(
        agent_command,
        ["--engine-url", "http://127.0.0.1:1", "--host", "0.0.0.0"],
        env={"LORAPLEX_AGENT_TOKEN": ""},
    )
    assert result.exit_code == 2
    assert "LORAPLEX_AGENT_TOKEN" in result.output


async def test_the_probes_answer_without_the_token(agent: AsyncTestClient) -> None:
    assert (await agent.get("/healthz")).status_code == 200
    assert (await agent.get("/readyz")).status_code == 200  # no registrar: ready at once


def test_agent_routes_of_a_process_without_a_token_are_closed() -> None:
    from loraplex.auth.agent_token import check_agent_token
    from loraplex.errors import Forbidden, Unauthenticated

    with pytest.raises(Unauthenticated):
        check_agent_token({}, "")  # no credential at all: 401, as on every route
    with pytest.raises(Forbidden, match="LORAPLEX_AGENT_TOKEN"):
        check_agent_token({"authorization": "Bearer anything"}, "")
