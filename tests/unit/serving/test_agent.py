"""The node agent: load, list and unload through its HTTP API, and the gateway's use of it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from litestar.testing import AsyncTestClient

from loraplex.adapters.errors import StoreUnavailable
from loraplex.serving.agent_app import create_agent_app
from loraplex.serving.disk_cache import DiskCache
from loraplex.serving.live import AgentOps, LiveConfig, LivePlacement, LocalOps, OpsRouter
from loraplex.serving.registry import EngineHandle
from tests.support.fake_driver import FakeDriver
from tests.support.live_cluster import BASE, Cluster, name_of


@pytest.fixture
async def agent(node_engine: EngineHandle, node_cache: DiskCache) -> AsyncIterator[AsyncTestClient]:
    """The agent app, in-process, with a disk cache of its own."""
    app = create_agent_app(node_engine, LocalOps(node_cache))
    async with AsyncTestClient(app, base_url="http://agent.local") as client:
        yield client


async def test_agent_loads_lists_and_unloads_on_its_engine(
    cluster: Cluster, agent: AsyncTestClient
) -> None:
    version = cluster.version()
    body = {
        "version_id": str(version.version_id),
        "storage_key": version.storage_key,
        "files": dict(version.files),
    }
    loaded = await agent.post("/load", json=body)
    assert loaded.status_code == 200
    assert loaded.json() == {"name": name_of(version), "tier": "cold"}
    assert (await agent.get("/adapters")).json()["adapters"] == [name_of(version)]
    assert (await agent.post("/unload", json={"name": name_of(version)})).status_code == 200
    assert (await agent.get("/adapters")).json()["adapters"] == []


async def test_agent_refuses_a_name_loraplex_did_not_make(agent: AsyncTestClient) -> None:
    response = await agent.post("/unload", json={"name": "../../etc"})
    assert response.status_code == 400


async def test_gateway_loads_through_the_agent_of_an_engine_with_agent_url(
    cluster: Cluster, agent: AsyncTestClient, node_engine: EngineHandle
) -> None:
    remote = FakeDriver(url="http://node-engine")  # the gateway's own driver to that engine
    handle = EngineHandle("n1", "n1", remote.url, "vllm", BASE, 64, 1, 2, remote, healthy=True)
    handle.agent_url = "http://agent.local"
    cluster.registry.add(handle)
    transport = httpx.ASGITransport(app=agent.app)  # type: ignore[arg-type]

    def via_test_app(url: str) -> AgentOps:
        return AgentOps(url, http=httpx.AsyncClient(base_url=url, transport=transport))

    ops = OpsRouter(LocalOps(cluster.cache), agent=via_test_app)
    placement = LivePlacement(cluster.registry, ops, cluster.facts, LiveConfig())
    version = cluster.version()
    seat = await placement.acquire(BASE, version.version_id)
    assert seat is not None and seat.engine is handle
    assert name_of(version) in node_engine.driver.adapters  # type: ignore[attr-defined]
    assert name_of(version) not in remote.adapters  # nothing was loaded by the gateway itself
    seat.release()
    await placement.stop()


class _StoreDown:
    """An object store that cannot be reached."""

    def get_file(self, key: str, target: object, sha256: object = None) -> None:
        raise StoreUnavailable("endpoint http://10.0.0.9:9000 unreachable")


async def test_a_store_outage_on_the_agent_reaches_the_gateway_as_one(
    cluster: Cluster, node_engine: EngineHandle, tmp_path: Path
) -> None:
    """Loading through an agent whose store is down fails as loading in-process would: the
    gateway then answers 503 object_store_unavailable with Retry-After, not engine_error."""
    cache = DiskCache(tmp_path / "down-cache", 10**9, _StoreDown())  # type: ignore[arg-type]
    app = create_agent_app(node_engine, LocalOps(cache))
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    ops = AgentOps(
        "http://agent.local",
        http=httpx.AsyncClient(base_url="http://agent.local", transport=transport),
    )
    version = cluster.version()
    with pytest.raises(StoreUnavailable):
        await ops.load(node_engine, version)
    await ops.aclose()


def _sample(page: str, name: str) -> float | None:
    """The value of the unlabelled series `name` (or of its `result="ok"` child) in `page`."""
    for line in page.splitlines():
        if line.startswith((f"{name} ", f'{name}{{result="ok"}} ')):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_the_agents_metrics_show_a_load_and_the_cache_it_filled(
    cluster: Cluster, agent: AsyncTestClient
) -> None:
    before = (await agent.get("/metrics")).text
    assert _sample(before, "loraplex_agent_cache_bytes") == 0
    version = cluster.version()
    body = {"version_id": str(version.version_id), "storage_key": version.storage_key,
            "files": dict(version.files)}  # fmt: skip
    assert (await agent.post("/load", json=body)).status_code == 200
    page = await agent.get("/metrics")  # no token: the series name no tenant
    assert page.status_code == 200
    assert _sample(page.text, "loraplex_agent_loads_total") == 1
    assert (_sample(page.text, "loraplex_agent_cache_bytes") or 0) > 0
    assert "loraplex_inference_requests" not in page.text  # the API's series stay out


class _Switchable:
    """The cluster's object store, until the test takes it down."""

    def __init__(self, store: object) -> None:
        self.store = store
        self.down = False

    def _up(self) -> object:
        if self.down:
            raise StoreUnavailable("endpoint http://10.0.0.9:9000 unreachable")
        return self.store

    def get_file(self, key: str, target: Path, sha256: str) -> None:
        self._up().get_file(key, target, sha256)  # type: ignore[attr-defined]

    def exists(self, key: str) -> bool:
        return self._up().exists(key)  # type: ignore[attr-defined, no-any-return]


async def test_a_load_the_store_cannot_serve_costs_a_full_engine_no_adapter(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The gateway asks the agent whether it can fetch before it evicts: with the store down, a
    request for a new adapter on a full engine fails, and the adapter it would have evicted
    stays loaded and keeps serving."""
    store = _Switchable(cluster.store)
    node = EngineHandle("n1", "n1", "http://node-engine", "vllm", BASE, 64, 1, 1,
                        FakeDriver(url="http://node-engine"), healthy=True)  # fmt: skip
    app = create_agent_app(node, LocalOps(DiskCache(tmp_path / "node", 10**9, store)))  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    remote = FakeDriver(url="http://node-engine")
    handle = EngineHandle("n1", "n1", remote.url, "vllm", BASE, 64, 1, 1, remote, healthy=True)
    handle.agent_url = "http://agent.local"
    cluster.registry.add(handle)

    def via_test_app(url: str) -> AgentOps:
        return AgentOps(url, http=httpx.AsyncClient(base_url=url, transport=transport))

    placement = LivePlacement(
        cluster.registry, OpsRouter(LocalOps(cluster.cache), agent=via_test_app),
        cluster.facts, LiveConfig(),
    )  # fmt: skip
    served, refused = cluster.version(), cluster.version()
    seat = await placement.acquire(BASE, served.version_id)
    assert seat is not None
    seat.release()
    store.down = True
    with pytest.raises(StoreUnavailable):
        await placement.acquire(BASE, refused.version_id)
    assert set(node.driver.adapters) == {name_of(served)}  # type: ignore[attr-defined]
    seat = await placement.acquire(BASE, served.version_id)
    assert seat is not None and seat.engine is handle
    seat.release()
    await placement.stop()
