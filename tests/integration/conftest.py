"""Integration fixtures: the engines, one API process and trained adapters per test session.

The API runs as a real uvicorn process (so streaming, slow readers and disconnects behave
as in production); the tests drive it with the official `openai` SDK and raw sockets.

`served` is the production shape: base model `loraplex-tiny` served by two SGLang engines
of different rank classes (64 and 16), so placement sends each adapter to the smallest
class that fits. `served.on("vllm")` is the same tenant and adapters on a vLLM engine,
under base model `loraplex-tiny-vllm`; it is registered the first time a test asks.
Tests of engine behaviour take `served_each`, which runs them once on each kind.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.adapters.facts import facts_to_json, read_base_model_facts
from loraplex.bench.server import api_process
from loraplex.db.config import sqlalchemy_config
from loraplex.settings import Settings
from tests.conftest import Api
from tests.support.adapter_api import upload_files
from tests.support.engine import (  # noqa: F401 - fixtures
    KINDS,
    RunningEngine,
    engine_config,
    engine_of,
    running_engine,
    sglang_engine,
    vllm_engine,
)
from tests.support.trained import trained_adapter

BASE = "loraplex-tiny"
RANKS = (8, 16, 64)
FILES = ("adapter_config.json", "adapter_model.safetensors")
BASE_OF_KIND = {"sglang": BASE, "vllm": f"{BASE}-vllm"}


@dataclass(frozen=True)
class Served:
    """What the gateway tests share: the API, a tenant, its adapters, and the engines."""

    url: str
    pid: int
    tenant_id: str
    key: str
    operator_key: str
    engine: RunningEngine  # the largest rank class: its model dir is every engine's
    adapters: dict[int, tuple[str, Path]]  # rank -> (adapter name, local folder)
    base: str = BASE
    engines: tuple[RunningEngine, ...] = ()
    engine_ids: dict[str, str] = field(default_factory=dict)  # engine url -> API engine id
    kinds: Callable[[str], Served] | None = field(default=None, repr=False, compare=False)

    @property
    def kind(self) -> str:
        """The engine kind this view serves through."""
        return self.engine.kind

    def on(self, kind: str) -> Served:
        """The same API and tenant, with base model and adapters served by `kind`."""
        assert self.kinds is not None
        return self.kinds(kind)

    def headers(self) -> dict[str, str]:
        """Authorization for the tenant's key."""
        return {"Authorization": f"Bearer {self.key}"}

    def operator(self) -> dict[str, str]:
        """Authorization for the operator key."""
        return {"Authorization": f"Bearer {self.operator_key}"}


@pytest.fixture
async def sessions(settings: Settings) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Sessions on the test database, outside the app (as a worker or a CLI has them)."""
    config = sqlalchemy_config(settings)
    yield config.create_session_maker()
    await config.get_engine().dispose()


@pytest.fixture(scope="session")
def gateway_settings(settings: Settings) -> Settings:
    """The API process's settings: small stream buffer and quick timeouts so tests are fast."""
    return replace(
        settings,
        stream_buffer_bytes=512,
        stream_heartbeat_s=1.0,
        # the product's default: in CI a busy 2-core machine once kept vLLM's first token
        # of a logprobs request past 30 s
        ttft_timeout_s=60.0,
        idle_timeout_s=20.0,
        engine_health_interval_s=1.0,
        socket_sndbuf_bytes=16384,
        resume_window_s=3.0,
        job_heartbeat_timeout_s=6.0,
        job_reap_interval_s=2.0,
        job_progress_interval_s=0.5,
        max_training_file_bytes=256 * 1024,
    )


class Platform:
    """The session's API process, tenant and trained adapters; one view per engine kind."""

    def __init__(self, url: str, pid: int, operator_key: str, root: Path, stack: ExitStack):
        self.url, self.pid, self.operator_key, self.root = url, pid, operator_key, root
        self.stack = stack
        self.ops = {"Authorization": f"Bearer {operator_key}"}
        self.views: dict[str, Served] = {}
        slug = f"gw-{secrets.token_hex(3)}"
        tenant = self._post("/api/v1/tenants", {"slug": slug, "name": slug, "plan": "pro"})
        self.tenant_id = tenant["id"]
        self.key = self._post(
            f"/api/v1/tenants/{self.tenant_id}/api-keys",
            {"name": "gw", "scopes": ["admin", "inference", "fine-tune"]},
        )["key"]

    def _post(self, path: str, body: dict) -> dict:
        response = httpx.post(f"{self.url}{path}", json=body, headers=self.ops, timeout=60)
        assert response.status_code in (200, 201), response.text
        return response.json()

    def view(self, kind: str, engines: Callable[[], list[RunningEngine]]) -> Served:
        """The view for `kind`, registering its base model, engines and adapters once."""
        if kind not in self.views:
            self.views[kind] = self._register(kind, engines())
        return self.views[kind]

    def register_base(self, name: str, model_dir: Path) -> None:
        """Register the generated model under `name` (already registered is fine)."""
        facts = {
            **facts_to_json(read_base_model_facts(model_dir, name)),
            "name": name,
            "source": str(model_dir),
        }
        response = httpx.post(f"{self.url}/api/v1/base-models", json=facts, headers=self.ops)
        assert response.status_code in (201, 409), response.text

    def register_engine(self, engine: RunningEngine, base: str, prefix: str = "cpu") -> str:
        """Register a running engine for `base`; returns its API id."""
        return self._post(
            "/api/v1/engines",
            {
                "name": f"{prefix}-{engine.kind}-r{engine.max_lora_rank}-{secrets.token_hex(2)}",
                "url": engine.url,
                "kind": engine.kind,
                "base_model": base,
                "max_lora_rank": engine.max_lora_rank,
                "gpu_slots": engine.gpu_slots,
                "host_slots": engine.host_slots,
            },
        )["id"]

    def _register(self, kind: str, engines: list[RunningEngine]) -> Served:
        base, first = BASE_OF_KIND[kind], engines[0]
        self.register_base(base, first.model_dir)
        ids = {engine.url: self.register_engine(engine, base) for engine in engines}
        adapters = self._upload_trained(first.model_dir, base, kind)
        wait_in_rotation(self.url, self.ops, list(ids.values()))
        return Served(
            self.url, self.pid, self.tenant_id, self.key, self.operator_key, first,
            adapters, base, tuple(engines), ids, self.get,
        )  # fmt: skip

    def _upload_trained(self, model_dir: Path, base: str, kind: str) -> dict[int, tuple]:
        adapters = {}
        tenant = f"/api/v1/tenants/{self.tenant_id}/adapters"
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=60) as http:
            for rank in RANKS:
                folder = self.root / f"{kind}-r{rank}"
                if not folder.exists():
                    trained_adapter(model_dir, folder, rank=rank, seed=rank, base_name=base)
                name = "bot" if kind == "sglang" else f"bot-{kind}"
                name = f"{name}-r{rank}"
                http.post(tenant, json={"name": name, "base_model": base})
                files = [("file", (n, (folder / n).read_bytes())) for n in FILES]
                response = http.post(f"{tenant}/{name}/versions", files=files)
                assert response.status_code == 201, response.text
                adapters[rank] = (name, folder)
        return adapters

    def get(self, kind: str) -> Served:
        """The view for `kind`, starting its engines on first use."""
        if kind == "sglang":
            return self.view(kind, self._sglang_engines)
        return self.view(kind, lambda: [self._engine("vllm")])

    def _sglang_engines(self) -> list[RunningEngine]:
        return [self._engine("sglang"), self._engine("sglang-r16")]

    def _engine(self, role: str) -> RunningEngine:
        return self.stack.enter_context(running_engine(engine_config(role), role))


def wait_in_rotation(url: str, ops: dict[str, str], engine_ids: list[str]) -> None:
    """Block until every engine in `engine_ids` is in the API's rotation."""
    waiting = set(engine_ids)
    for _ in range(240):
        for engine_id in list(waiting):
            live = httpx.get(f"{url}/api/v1/engines/{engine_id}", headers=ops).json().get("live")
            if live and live.get("in_rotation"):
                waiting.discard(engine_id)
        if not waiting:
            return
        time.sleep(0.5)
    raise AssertionError(f"engines never came into rotation: {sorted(waiting)}")


@pytest.fixture(scope="session")
def platform(
    gateway_settings: Settings, operator_key: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    """The API process with a tenant; engines join when a view is first asked for."""
    with ExitStack() as stack:
        # Engines are entered on this stack after the API, so they stop before it does.
        url, pid = stack.enter_context(api_process(gateway_settings.to_env()))
        yield Platform(url, pid, operator_key, tmp_path_factory.mktemp("adapters"), stack)


@pytest.fixture(scope="session")
def served(platform: Platform) -> Served:
    """The platform served by SGLang, the production engine (two rank classes)."""
    return platform.get("sglang")


@pytest.fixture(params=KINDS)
def served_each(request: pytest.FixtureRequest, platform: Platform) -> Served:
    """The platform served by each engine kind in turn, for tests of engine behaviour."""
    return platform.get(request.param)


__all__ = ["Api", "Served", "upload_files"]
