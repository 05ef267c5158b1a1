"""Operators register, list, inspect and remove engines; the poller's view shows through."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar

from loraplex.api.deps import services_of
from loraplex.db.config import sqlalchemy_config
from loraplex.serving.engines.reported_facts import ReportedFacts
from loraplex.serving.loader import engine_adapter_name
from loraplex.serving.registry import EngineRegistry
from loraplex.settings import Settings
from tests.conftest import Api
from tests.support.adapter_api import create_adapter, ensure_tiny_base, upload_valid
from tests.support.fake_driver import FakeDriver

ENGINES = "/api/v1/engines"


async def register(operator: Api, **overrides: Any) -> Any:
    """POST an engine on the tiny base model; return the response."""
    body = {
        "name": f"engine-{secrets.token_hex(3)}",
        "url": "http://127.0.0.1:1",
        "kind": "vllm",
        "base_model": await ensure_tiny_base(operator),
        "max_lora_rank": 16,
        "gpu_slots": 2,
        "host_slots": 4,
        **overrides,
    }
    return await operator.post(ENGINES, json=body)


async def registered(operator: Api, **overrides: Any) -> dict[str, Any]:
    """Register an engine that must be accepted; return it."""
    response = await register(operator, **overrides)
    assert response.status_code == 201, response.text
    return dict(response.json())


async def all_engines(operator: Api) -> list[dict[str, Any]]:
    """Every engine the list shows."""
    response = await operator.get(ENGINES, params={"page_size": 100})
    assert response.status_code == 200, response.text
    return list(response.json()["items"])


@pytest.fixture
def without_poller(app: Litestar) -> Any:
    """The app as a process that polls no engines: the API shows what the database holds."""
    services = services_of(app)
    previous, services.registry = services.registry, None
    yield
    services.registry = previous


@dataclass
class Live:
    """A polling registry installed in the app, and its in-memory engines by URL."""

    registry: EngineRegistry
    drivers: dict[str, FakeDriver] = field(default_factory=dict)

    def driver_for(self, kind: str, url: str) -> FakeDriver:
        """The driver factory: one fake engine per URL."""
        return self.drivers.setdefault(url, FakeDriver(kind, url))


@pytest.fixture
async def live(app: Litestar, settings: Settings) -> AsyncIterator[Live]:
    """A registry with in-memory engines, polling the session's database, installed in the app."""
    config = sqlalchemy_config(settings)
    live = Live(EngineRegistry(interval_s=3600, session_factory=config.create_session_maker()))
    live.registry.driver_factory = live.driver_for
    services = services_of(app)
    previous, services.registry = services.registry, live.registry
    try:
        yield live
    finally:
        services.registry = previous
        await live.registry.stop()
        await config.get_engine().dispose()


@pytest.mark.usefixtures("without_poller")
async def test_a_registered_engine_can_be_read_back(operator: Api) -> None:
    engine = await registered(operator, kind="sglang", max_lora_rank=64)
    response = await operator.get(f"{ENGINES}/{engine['id']}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["kind"], body["max_lora_rank"], body["source"]) == ("sglang", 64, "database")
    assert (body["status"], body["live"]) == ("unknown", None)


async def test_registered_engines_are_listed(operator: Api) -> None:
    engine = await registered(operator)
    assert engine["name"] in [e["name"] for e in await all_engines(operator)]


async def test_a_removed_engine_is_gone(operator: Api) -> None:
    engine = await registered(operator)
    assert (await operator.delete(f"{ENGINES}/{engine['id']}")).status_code == 204
    assert (await operator.get(f"{ENGINES}/{engine['id']}")).status_code == 404
    assert engine["name"] not in [e["name"] for e in await all_engines(operator)]


async def test_registering_and_removing_are_audited(operator: Api) -> None:
    engine = await registered(operator)
    await operator.delete(f"{ENGINES}/{engine['id']}")
    entries = (await operator.get("/api/v1/audit", params={"page_size": 100})).json()["items"]
    actions = {e["action"] for e in entries if e["target_id"] == engine["id"]}
    assert actions == {"engine.register", "engine.deregister"}


async def test_a_duplicate_name_is_a_409(operator: Api) -> None:
    engine = await registered(operator)
    response = await register(operator, name=engine["name"])
    assert response.status_code == 409, response.text


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"base_model": "no-such-model"}, "base_model"),
        ({"kind": "tgi"}, "kind"),
        ({"url": "ftp://engine:1"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"agent_url": "engine:9000"}, "agent_url"),
        ({"gpu_slots": 8, "host_slots": 4}, "host_slots"),
        ({"max_lora_rank": 0}, "max_lora_rank"),
        ({"max_lora_rank": 381}, "max_lora_rank"),  # vLLM refuses ranks outside its list
        ({"gpu_slots": 13493, "host_slots": 16774}, "gpu_slots"),
        ({"name": "Has Spaces"}, "name"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(
    operator: Api, overrides: dict[str, Any], field: str
) -> None:
    before = len(await all_engines(operator))
    response = await register(operator, **overrides)
    assert response.status_code == 400, response.text
    assert field in response.text
    assert len(await all_engines(operator)) == before


@pytest.mark.parametrize(
    "method, path",
    [
        ("POST", ENGINES),
        ("GET", ENGINES),
        ("GET", f"{ENGINES}/{uuid.uuid4()}"),
        ("DELETE", f"{ENGINES}/{uuid.uuid4()}"),
        ("GET", f"{ENGINES}/{uuid.uuid4()}/adapters"),
    ],
)
async def test_a_tenant_key_is_refused(make_tenant: Any, method: str, path: str) -> None:
    tenant = await make_tenant()
    response = await tenant.api.request(method, path, json={} if method == "POST" else None)
    assert response.status_code == 403, response.text


@pytest.mark.parametrize("suffix", ["", "/adapters"])
async def test_an_unknown_engine_is_a_404(operator: Api, suffix: str) -> None:
    assert (await operator.get(f"{ENGINES}/{uuid.uuid4()}{suffix}")).status_code == 404


async def test_removing_an_unknown_engine_is_a_404(operator: Api) -> None:
    assert (await operator.delete(f"{ENGINES}/{uuid.uuid4()}")).status_code == 404


@pytest.mark.usefixtures("without_poller")
async def test_without_a_poller_the_adapters_view_is_not_live(operator: Api) -> None:
    engine = await registered(operator)
    response = await operator.get(f"{ENGINES}/{engine['id']}/adapters")
    assert response.status_code == 200, response.text
    assert response.json()["live"] is False


@pytest.mark.usefixtures("without_poller")
async def test_the_poller_records_health_in_the_engine_row(
    operator: Api, settings: Settings
) -> None:
    engine = await registered(operator)
    config = sqlalchemy_config(settings)
    registry = EngineRegistry(
        session_factory=config.create_session_maker(), driver_factory=lambda k, u: FakeDriver(k, u)
    )
    try:
        await registry.start()
    finally:
        await registry.stop()
        await config.get_engine().dispose()
    body = (await operator.get(f"{ENGINES}/{engine['id']}")).json()
    assert body["status"] == "healthy"
    assert body["last_heartbeat_at"] is not None


async def test_an_engine_registered_while_polling_joins_rotation(operator: Api, live: Live) -> None:
    await live.registry.start()
    # Its own URL: the registry adopts earlier tests' engines, one of them SGLang at the
    # default URL, and the engine there would contradict a vLLM registration.
    engine = await registered(operator, url="http://127.0.0.1:3")
    await live.registry.poll_once()
    body = (await operator.get(f"{ENGINES}/{engine['id']}")).json()
    assert body["status"] == "healthy"
    assert body["live"]["in_rotation"] is True
    assert engine["id"] in [h.id for h in live.registry.candidates(engine["base_model"])]


async def test_loaded_adapters_map_back_to_their_tenant_and_version(
    operator: Api, make_tenant: Any, live: Live, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    await ensure_tiny_base(operator)
    adapter = await create_adapter(tenant.api, tenant.id)
    version = await upload_valid(tenant.api, tenant.id, adapter, tmp_path)
    engine = await registered(operator, url="http://127.0.0.1:2")
    await live.registry.start()
    ours = engine_adapter_name(uuid.UUID(version["id"]))
    live.drivers["http://127.0.0.1:2"].adapters.update({ours: tmp_path, "stray": tmp_path})
    await live.registry.poll_once()
    body = (await operator.get(f"{ENGINES}/{engine['id']}/adapters")).json()
    assert body["live"] is True
    by_name = {a["name"]: a for a in body["adapters"]}
    assert by_name[ours]["tenant"] == tenant.slug
    assert (by_name[ours]["adapter"], by_name[ours]["version"]) == (adapter, version["number"])
    assert by_name["stray"]["version_id"] is None


async def test_an_engine_registered_while_down_joins_rotation_only_if_it_confirms_its_facts(
    operator: Api, live: Live
) -> None:
    url = "http://127.0.0.1:4"
    engine_down = live.drivers[url] = FakeDriver("vllm", url)
    engine_down.up = False
    engine = await registered(operator, url=url, gpu_slots=2, host_slots=4)  # taken on its word
    await live.registry.start()
    engine_down.up = True
    engine_down.reported = ReportedFacts(kind="vllm", gpu_slots=4)  # started with --max-loras 4
    await live.registry.poll_once()
    body = (await operator.get(f"{ENGINES}/{engine['id']}")).json()
    assert body["live"]["in_rotation"] is False
    assert "--max-loras 4" in body["live"]["last_error"]


async def test_an_engine_serving_another_base_model_is_refused_naming_base_model(
    operator: Api, live: Live
) -> None:
    url = "http://127.0.0.1:6"
    other = live.drivers[url] = FakeDriver("vllm", url)
    other.reported = ReportedFacts(kind="vllm", served_models=("llama-3.1-8b",))
    response = await register(operator, url=url)
    assert response.status_code == 400, response.text
    assert response.json()["param"] == "base_model"
    assert "serves 'llama-3.1-8b'" in response.json()["detail"]


async def test_an_engine_registered_while_down_on_another_base_model_stays_out_naming_it(
    operator: Api, live: Live
) -> None:
    url = "http://127.0.0.1:7"
    engine_down = live.drivers[url] = FakeDriver("vllm", url)
    engine_down.up = False
    engine = await registered(operator, url=url)  # silent: taken on its word
    await live.registry.start()
    engine_down.up = True
    engine_down.reported = ReportedFacts(kind="vllm", served_models=("llama-3.1-8b",))
    await live.registry.poll_once()
    body = (await operator.get(f"{ENGINES}/{engine['id']}")).json()
    assert body["status"] == "unhealthy"
    assert body["live"]["in_rotation"] is False
    assert "base_model is 'tiny-llama'" in body["live"]["last_error"]
