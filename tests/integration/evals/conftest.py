"""A live stack for evals: the stand-in engine, one API process, a Celery worker whose eval
runs call that API, and a tenant with a key; shared by the package's tests."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest

from loraplex.adapters.facts import facts_to_json
from loraplex.bench.server import api_process, free_port
from loraplex.settings import Settings
from tests.integration.conftest import wait_in_rotation
from tests.integration.finetune.conftest import Process
from tests.support.lora_files import TINY_BASE
from tests.support.operators import operator_key
from tests.support.stand_in_engine import stand_in_engine

ENGINE_NAME = "evals"  # the stand-in answers every token with its name


@dataclass(frozen=True)
class Stack:
    """The API's URL, its settings, and the tenant's id and key."""

    url: str
    settings: Settings
    tenant_id: str
    key: str

    def headers(self) -> dict[str, str]:
        """Authorization for the tenant's key."""
        return {"Authorization": f"Bearer {self.key}"}


@pytest.fixture(scope="package")
def stack(settings: Settings) -> Iterator[Stack]:
    """Engine, API and worker up; the tenant made."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    live = replace(settings, engine_health_interval_s=1.0, eval_api_url=url)
    with (
        stand_in_engine(TINY_BASE.name, ENGINE_NAME) as engine_url,
        api_process(live.to_env(), port),
    ):
        worker = Process(["worker", "-Q", "default", "-c", "1"], live.to_env()).start()
        try:
            yield _set_up(url, live, engine_url)
        finally:
            worker.stop()


def _set_up(url: str, settings: Settings, engine_url: str) -> Stack:
    ops = {"Authorization": f"Bearer {operator_key(settings, 'evals')}"}

    def post(path: str, body: dict[str, Any]) -> Any:
        response = httpx.post(url + path, json=body, headers=ops, timeout=30)
        assert response.status_code in (200, 201, 409), response.text
        return response.json()

    post("/api/v1/base-models", {**facts_to_json(TINY_BASE), "source": "generated://"})
    engine = post(
        "/api/v1/engines",
        {
            "name": f"evals-{secrets.token_hex(2)}",
            "url": engine_url,
            "kind": "vllm",
            "base_model": TINY_BASE.name,
            "max_lora_rank": 64,
            "gpu_slots": 4,
            "host_slots": 8,
        },
    )["id"]
    wait_in_rotation(url, ops, [engine])
    return new_tenant(Stack(url, settings, "", ""), ops, "evals", "fine-tune")


def new_tenant(stack: Stack, ops: dict[str, str], name: str, *more_scopes: str) -> Stack:
    """`stack` with a new enterprise tenant (slug `name-...`) and its key for admin,
    inference and `more_scopes`, made with the operator headers `ops`."""
    slug = f"{name}-{secrets.token_hex(3)}"
    body = {"slug": slug, "name": slug, "plan": "enterprise"}
    tenant = httpx.post(f"{stack.url}/api/v1/tenants", json=body, headers=ops, timeout=30)
    assert tenant.status_code == 201, tenant.text
    tenant_id = tenant.json()["id"]
    key = httpx.post(
        f"{stack.url}/api/v1/tenants/{tenant_id}/api-keys",
        json={"name": name, "scopes": ["admin", "inference", *more_scopes]},
        headers=ops,
        timeout=30,
    )
    assert key.status_code == 201, key.text
    return replace(stack, tenant_id=tenant_id, key=key.json()["key"])
