"""The node agent asks for its own secret or the API's agent token, the API side sends the
engine's secret (else the token), without either the agent serves loopback only, and to
register itself it needs a node credential of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import msgspec
import pytest
from click.testing import CliRunner
from litestar import Litestar
from litestar.testing import AsyncTestClient

from loraplex.auth.agent_token import new_agent_secret, open_agent_secret, seal_agent_secret
from loraplex.control.engines.schemas import AgentRegistration
from loraplex.serving.agent_app import AgentExposed, check_bind, create_agent_app
from loraplex.serving.agent_cli import agent as agent_command
from loraplex.serving.agent_registration import Registrar
from loraplex.serving.disk_cache import DiskCache
from loraplex.serving.engines import EngineError
from loraplex.serving.live import AgentOps, LocalOps, OpsRouter
from loraplex.serving.policy import Tier
from loraplex.serving.registry import EngineHandle, EngineRegistry
from loraplex.settings import Settings
from tests.support.fake_driver import FakeDriver
from tests.support.live_cluster import BASE, Cluster, name_of
from tests.unit.serving.test_agent_registration import REGISTRATION, Fake
from tests.unit.serving.test_registry_reported_health import row_of

TOKEN = "agent-s3cret"
AGENT_URL = "http://agent.local"
SECRET_A, SECRET_B = new_agent_secret(), new_agent_secret()  # two self-registered agents'
KEY = "the-api-secret-key"


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


def test_registering_needs_a_node_credential_not_the_agent_token() -> None:
    result = CliRunner().invoke(
        agent_command,
        ["--engine-url", "http://127.0.0.1:1", "--register-with", "http://127.0.0.1:2",
         "--name", "node-a", "--base-model", BASE],
        env={"LORAPLEX_AGENT_TOKEN": TOKEN, "LORAPLEX_NODE_CREDENTIAL": ""},
    )  # fmt: skip
    assert result.exit_code == 2
    assert "LORAPLEX_NODE_CREDENTIAL" in result.output and "loraplex nodes mint" in result.output


def registered_agent(
    node_engine: EngineHandle, node_cache: DiskCache, secret: str, token: str = ""
) -> Litestar:
    """An agent that registers itself with `secret` (a fake API takes its heartbeats), and
    also takes the shared `token` if one is given."""
    fake = Fake()
    api = httpx.AsyncClient(
        base_url="http://api", transport=httpx.MockTransport(fake.api),
        headers={"Authorization": "Bearer t0ken"},
    )  # fmt: skip
    probe = httpx.AsyncClient(transport=httpx.MockTransport(fake.engine))
    registrar = Registrar("http://api", "t0ken", replace(REGISTRATION, agent_secret=secret),
                          "http://127.0.0.1:30000/health", http=api, probe=probe)  # fmt: skip
    return create_agent_app(node_engine, LocalOps(node_cache), token=token, registrar=registrar)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_registered_agent_takes_its_own_secret_and_no_other_agents(
    node_engine: EngineHandle, node_cache: DiskCache
) -> None:
    app = registered_agent(node_engine, node_cache, SECRET_A)
    async with AsyncTestClient(app, base_url=AGENT_URL) as agent:
        assert (await agent.get("/adapters", headers=bearer(SECRET_A))).status_code == 200
        refused = await agent.get("/adapters", headers=bearer(SECRET_B))  # node B's secret
        assert refused.status_code == 401 and "agent token" in refused.json()["detail"]
        # The shared token is not set here: it opens nothing.
        assert (await agent.get("/adapters", headers=bearer(TOKEN))).status_code == 401
        for path in ("/load", "/unload"):
            answer = await agent.post(path, json={}, headers=bearer(SECRET_B))
            assert answer.status_code == 401


async def test_a_registered_agent_takes_the_shared_token_only_when_it_is_set_there(
    node_engine: EngineHandle, node_cache: DiskCache
) -> None:
    app = registered_agent(node_engine, node_cache, SECRET_A, token=TOKEN)
    async with AsyncTestClient(app, base_url=AGENT_URL) as agent:
        for accepted in (SECRET_A, TOKEN):
            assert (await agent.get("/adapters", headers=bearer(accepted))).status_code == 200
        assert (await agent.get("/adapters", headers=bearer(SECRET_B))).status_code == 401


def test_a_registering_agent_may_serve_any_address_with_its_own_secret() -> None:
    check_bind("0.0.0.0", SECRET_A)  # what agent_cli passes without LORAPLEX_AGENT_TOKEN


def handle_with(name: str, secret: str) -> EngineHandle:
    handle = EngineHandle(name, name, f"http://{name}-engine", "vllm", BASE, 64, 1, 2, FakeDriver())
    handle.agent_url, handle.agent_secret = AGENT_URL, secret
    return handle


def test_agent_ops_send_the_engines_own_secret_else_the_shared_token() -> None:
    ops = AgentOps(AGENT_URL, token=TOKEN)
    assert ops.auth(handle_with("n1", SECRET_A)) == bearer(SECRET_A)  # never the shared one
    assert ops.auth(handle_with("n2", SECRET_B)) == bearer(SECRET_B)
    assert ops.auth(handle_with("op", "")) == bearer(TOKEN)  # an operator's (or older) agent
    assert AgentOps(AGENT_URL).auth(handle_with("op", "")) == {}


async def test_the_ops_router_sends_each_engine_its_agents_secret(cluster: Cluster) -> None:
    sent: list[tuple[str, str]] = []

    def agent(request: httpx.Request) -> httpx.Response:
        sent.append((request.url.host, request.headers.get("authorization", "")))
        return httpx.Response(200, json={"name": "x", "tier": "cold"})

    def over_mock(url: str) -> AgentOps:
        http = httpx.AsyncClient(base_url=url, transport=httpx.MockTransport(agent))
        return AgentOps(url, http=http, token=TOKEN)

    router = OpsRouter(LocalOps(cluster.cache), agent=over_mock)
    a, b = handle_with("a", SECRET_A), handle_with("b", SECRET_B)
    a.agent_url, b.agent_url = "http://node-a:8200", "http://node-b:8200"
    for handle in (a, b):
        await router.for_engine(handle).load(handle, cluster.version())
    assert sent == [("node-a", f"Bearer {SECRET_A}"), ("node-b", f"Bearer {SECRET_B}")]
    await router.aclose()


def test_a_sealed_secret_opens_only_for_its_engine_under_its_key() -> None:
    sealed = seal_agent_secret(KEY, "node-a", SECRET_A)
    assert SECRET_A not in sealed
    assert open_agent_secret(KEY, "node-a", sealed) == SECRET_A
    assert open_agent_secret(KEY, "node-b", sealed) == ""  # copied to another engine's row
    assert open_agent_secret("another-key", "node-a", sealed) == ""  # the secret key changed
    assert open_agent_secret(KEY, "node-a", None) == ""


async def test_the_registry_opens_the_secret_its_engines_row_holds() -> None:
    registry = EngineRegistry(agent_secret_key=KEY)
    handle = handle_with("node-a", "")
    registry.add(handle)
    row = row_of(handle, agent_secret_sealed=seal_agent_secret(KEY, "node-a", SECRET_A))
    await registry.adopt(row, BASE)  # type: ignore[arg-type]
    assert handle.agent_secret == SECRET_A and SECRET_A not in repr(handle)
    row = row_of(handle, agent_secret_sealed=seal_agent_secret(KEY, "node-a", SECRET_B))
    await registry.adopt(row, BASE)  # type: ignore[arg-type]
    assert handle.agent_secret == SECRET_B  # its agent restarted with a new one
    await registry.adopt(row_of(handle), BASE)  # type: ignore[arg-type]
    assert handle.agent_secret == ""  # an older agent again: the shared token


@pytest.mark.parametrize("secret", ["short", SECRET_A + "\n", SECRET_A[:40] + " x", "a" * 257])
def test_a_registration_takes_only_a_secret_such_as_agents_make(secret: str) -> None:
    body = {"url": "http://e", "kind": "vllm", "base_model": BASE, "agent_url": "http://a"}
    made = msgspec.convert({**body, "agent_secret": SECRET_A}, AgentRegistration)
    assert made.agent_secret == SECRET_A
    with pytest.raises(msgspec.ValidationError, match="agent_secret"):
        msgspec.convert({**body, "agent_secret": secret}, AgentRegistration)
