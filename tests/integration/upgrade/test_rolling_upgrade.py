"""A rolling API upgrade across a migration: old and new API processes at once.

The rollout docs/deploy.md describes, step by step: the old release serves on its schema;
the migration Job brings the schema to the new head while the old pods still serve; new pods
start beside them. Migrations are additive, so through every step both releases answer
every tenant: sign-in by key, a streamed chat, adapters made on one and seen on the other,
an engine (a table the newest migrations change) registered through each.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from loraplex.adapters.facts import facts_to_json
from loraplex.bench.server import api_process
from loraplex.db import migrate
from loraplex.settings import Settings
from tests.conftest import create_database, drop_database
from tests.integration.conftest import wait_in_rotation
from tests.integration.upgrade.old_release import OldRelease, previous_release
from tests.support.lora_files import TINY_BASE
from tests.support.stand_in_engine import stand_in_engine


@pytest.fixture(scope="module")
def old(tmp_path_factory: pytest.TempPathFactory) -> OldRelease:
    release = previous_release(tmp_path_factory.mktemp("old-release"))
    if release is None:
        pytest.skip("no git history here to take the previous release from")
    assert release.imports_itself(), "the old release's process imported the working tree"
    return release


@pytest.fixture
async def empty_database() -> AsyncIterator[str]:
    name = f"loraplex_upgrade_{secrets.token_hex(4)}"
    yield await create_database(name)
    await drop_database(name)


class Caller:
    """One API process, called with one key."""

    def __init__(self, url: str, key: str) -> None:
        self.url, self.headers = url, {"Authorization": f"Bearer {key}"}

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = httpx.post(f"{self.url}{path}", json=body, headers=self.headers, timeout=60)
        assert response.status_code in (200, 201), f"{self.url}{path}: {response.text}"
        return dict(response.json())

    def get(self, path: str) -> dict[str, Any]:
        response = httpx.get(f"{self.url}{path}", headers=self.headers, timeout=60)
        assert response.status_code == 200, f"{self.url}{path}: {response.text}"
        return dict(response.json())

    def streamed_chat(self, model: str) -> str:
        """A streamed chat completion's text; fails unless it ends with [DONE]."""
        body = {"model": model, "stream": True, "max_tokens": 8,
                "messages": [{"role": "user", "content": "tokens=5 every=0.01"}]}  # fmt: skip
        events = []
        with httpx.stream(
            "POST", f"{self.url}/v1/chat/completions", json=body, headers=self.headers, timeout=60
        ) as response:
            assert response.status_code == 200, response.read().decode()
            events = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert events and events[-1] == "data: [DONE]", events[-3:]
        return "".join(events)


async def test_old_and_new_api_serve_through_the_migration_and_beside_each_other(
    old: OldRelease, empty_database: str, settings: Settings, tmp_path: Path
) -> None:
    env = replace(settings, database_url=empty_database, data_dir=tmp_path).to_env()
    old.cli("db", "upgrade", env=env)
    operator_key = old.cli("admin", "create-operator", "--email", "ops@example.com",
                           env=env).strip().splitlines()[-1]  # fmt: skip
    model = TINY_BASE.name
    with stand_in_engine(model) as engine_url, api_process({**env, **old.env()}) as (old_url, _):
        ops = Caller(old_url, operator_key)
        ops.post("/api/v1/base-models", {**facts_to_json(TINY_BASE), "source": "generated://"})
        tenant = ops.post("/api/v1/tenants", {"slug": "acme", "name": "acme", "plan": "pro"})
        key = ops.post(f"/api/v1/tenants/{tenant['id']}/api-keys",
                       {"name": "k", "scopes": ["admin", "inference"]})["key"]  # fmt: skip
        engine = _engine(ops, "old-engine", engine_url, model)
        wait_in_rotation(old_url, ops.headers, [engine])
        adapters = f"/api/v1/tenants/{tenant['id']}/adapters"
        on_old = Caller(old_url, key)
        on_old.post(adapters, {"name": "before", "base_model": model})
        assert on_old.streamed_chat(model)

        # The migration Job runs while the old release serves.
        await asyncio.to_thread(migrate.upgrade, empty_database)
        assert on_old.streamed_chat(model), "the old release stopped serving after the migration"
        on_old.post(adapters, {"name": "during", "base_model": model})
        _engine(ops, "old-after-migration", engine_url, model)

        with api_process(env) as (new_url, _):
            on_new = Caller(new_url, key)
            wait_in_rotation(new_url, ops.headers, [engine])
            on_new.post(adapters, {"name": "after", "base_model": model})
            _engine(Caller(new_url, operator_key), "new-engine", engine_url, model)
            for caller in (on_old, on_new):
                assert caller.streamed_chat(model)
                names = {a["name"] for a in caller.get(adapters)["items"]}
                assert {"before", "during", "after"} <= names, (caller.url, names)


def _engine(ops: Caller, name: str, url: str, model: str) -> str:
    body = {"name": name, "url": url, "kind": "vllm", "base_model": model,
            "max_lora_rank": 64, "gpu_slots": 4, "host_slots": 8}  # fmt: skip
    return str(ops.post("/api/v1/engines", body)["id"])
