"""Integration fixtures: one engine, one API process and trained adapters per test session.

The API runs as a real uvicorn process (so streaming, slow readers and disconnects behave
as in production); the tests drive it with the official `openai` SDK and raw sockets.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest

from loraplex.adapters.facts import facts_to_json, read_base_model_facts
from loraplex.bench.server import api_process
from loraplex.settings import Settings
from tests.conftest import Api
from tests.support.adapter_api import upload_files
from tests.support.engine import RunningEngine, vllm_engine  # noqa: F401 - fixture

BASE = "loraplex-tiny"
RANKS = (8, 16, 64)


@dataclass(frozen=True)
class Served:
    """What the gateway tests share: the API URL, a tenant, and its trained adapters."""

    url: str
    pid: int
    tenant_id: str
    key: str
    operator_key: str
    engine: RunningEngine
    adapters: dict[int, tuple[str, Path]]  # rank -> (adapter name, local folder)

    def headers(self) -> dict[str, str]:
        """Authorization for the tenant's key."""
        return {"Authorization": f"Bearer {self.key}"}

    def operator(self) -> dict[str, str]:
        """Authorization for the operator key."""
        return {"Authorization": f"Bearer {self.operator_key}"}


def _train(engine: RunningEngine, root: Path) -> dict[int, Path]:
    from loraplex.dev.make_adapter import make_adapter

    return {
        rank: make_adapter(engine.model_dir, root / f"r{rank}", rank=rank, seed=rank)
        for rank in RANKS
    }


@pytest.fixture(scope="session")
def gateway_settings(settings: Settings) -> Settings:
    """The API process's settings: small stream buffer and quick timeouts so tests are fast."""
    return replace(
        settings,
        stream_buffer_bytes=512,
        stream_heartbeat_s=1.0,
        ttft_timeout_s=30.0,
        idle_timeout_s=20.0,
        engine_health_interval_s=1.0,
        socket_sndbuf_bytes=16384,
        resume_window_s=3.0,
        job_heartbeat_timeout_s=6.0,
        job_reap_interval_s=2.0,
        job_progress_interval_s=0.5,
        max_training_file_bytes=256 * 1024,
    )


@pytest.fixture(scope="session")
def served(
    vllm_engine: RunningEngine,
    gateway_settings: Settings,
    operator_key: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Served]:
    """Register the engine's model and the engine, start the API, upload trained adapters."""
    folders = _train(vllm_engine, tmp_path_factory.mktemp("adapters"))
    with api_process(gateway_settings.to_env()) as (url, pid):
        ops = {"Authorization": f"Bearer {operator_key}"}
        facts = {
            **facts_to_json(read_base_model_facts(vllm_engine.model_dir, BASE)),
            "name": BASE,
            "source": str(vllm_engine.model_dir),
        }
        assert httpx.post(f"{url}/api/v1/base-models", json=facts, headers=ops).status_code in (
            201,
            409,
        )
        engine = {
            "name": f"cpu-{secrets.token_hex(3)}",
            "url": vllm_engine.url,
            "kind": "vllm",
            "base_model": BASE,
            "max_lora_rank": 64,
            "gpu_slots": 4,
            "host_slots": 8,
        }
        assert httpx.post(f"{url}/api/v1/engines", json=engine, headers=ops).status_code == 201
        slug = f"gw-{secrets.token_hex(3)}"
        tenant = httpx.post(
            f"{url}/api/v1/tenants", json={"slug": slug, "name": slug, "plan": "pro"}, headers=ops
        ).json()
        key = httpx.post(
            f"{url}/api/v1/tenants/{tenant['id']}/api-keys",
            json={"name": "gw", "scopes": ["admin", "inference", "fine-tune"]},
            headers=ops,
        ).json()["key"]
        adapters = {}
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60
        ) as http:
            for rank, folder in folders.items():
                name = f"bot-r{rank}"
                http.post(
                    f"/api/v1/tenants/{tenant['id']}/adapters",
                    json={"name": name, "base_model": BASE},
                )
                files = [
                    ("file", (n, (folder / n).read_bytes()))
                    for n in ("adapter_config.json", "adapter_model.safetensors")
                ]
                response = http.post(
                    f"/api/v1/tenants/{tenant['id']}/adapters/{name}/versions", files=files
                )
                assert response.status_code == 201, response.text
                adapters[rank] = (name, folder)
        _wait_in_rotation(url, ops)
        yield Served(url, pid, tenant["id"], key, operator_key, vllm_engine, adapters)


def _wait_in_rotation(url: str, ops: dict[str, str]) -> None:
    import time

    for _ in range(120):
        engines = httpx.get(f"{url}/api/v1/engines", headers=ops).json()
        items = engines["items"] if isinstance(engines, dict) else engines
        if any((e.get("live") or {}).get("in_rotation") for e in items):
            return
        time.sleep(0.5)
    raise AssertionError(f"engine never came into rotation: {engines}")


__all__ = ["Api", "Served", "upload_files"]
