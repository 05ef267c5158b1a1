"""Two analysts (as in two API processes) deciding on the same canary at the same moment:
exactly one of them promotes or rolls back, and one audit entry records it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from uuid import UUID

from redis.asyncio import Redis
from sqlalchemy import select

from loraplex.control.canary.analyst import CanaryAnalyst
from loraplex.control.canary.window import CanaryWindow
from loraplex.db.config import sqlalchemy_config
from loraplex.db.models import Adapter, AdapterAlias
from loraplex.settings import Settings
from tests.conftest import Api
from tests.support.adapter_api import adapter_with_versions

ANALYSIS = {"window_s": 60, "min_requests": 5, "max_error_rate_diff": 0.05,
            "max_ttft_p95_ratio": 2.0}  # fmt: skip
# The analysts below live an hour ahead, where the test's own API process (whose analyst
# runs on the real clock) sees none of the traffic and only waits.
AHEAD_S = 3600.0


async def test_two_analysts_at_once_roll_a_failing_canary_back_once(
    settings: Settings, operator: Api, make_tenant, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 2)
    aliases = f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases"
    stable = (await tenant.api.put(f"{aliases}/prod", json={"version": 1})).json()
    body = {"version": 2, "weight": 50, "analysis": ANALYSIS}
    assert (await tenant.api.put(f"{aliases}/prod/canary", json=body)).status_code == 200
    versions = await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/versions")
    ids = {v["number"]: v["id"] for v in versions.json()["items"]}
    alias_id = await _alias_id(settings, adapter)

    redis = Redis.from_url(settings.redis_url)
    ahead = lambda: time.time() + AHEAD_S  # noqa: E731
    window = CanaryWindow(redis, clock=ahead)
    for n in range(10):
        window.record(alias_id, UUID(ids[1]), None, 0.01)
        window.record(alias_id, UUID(ids[2]), "engine_error" if n % 2 else None, 0.01)
    await window.flush()
    config = sqlalchemy_config(settings)
    sessions = config.create_session_maker()
    analysts = [CanaryAnalyst(sessions, window, clock=ahead) for _ in range(2)]
    passes = await asyncio.gather(*(a.analyse_all() for a in analysts))
    await redis.aclose()
    await config.get_engine().dispose()

    mine = [applied for applied_all in passes for applied in applied_all
            if applied.alias_name == "prod" and applied.decision.figures["canary"]["requests"]]  # fmt: skip
    assert [a.decision.verdict for a in mine] == ["rollback", "rollback"]
    assert sum(a.won for a in mine) == 1
    audit = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/audit")).json()["items"]
    assert [e["action"] for e in audit].count("alias.canary_rollback") == 1
    alias = (await tenant.api.get(f"{aliases}/prod")).json()
    assert alias["version"] == stable["version"] and alias["canary_version"] is None
    assert alias["canary_decision"]["figures"]["canary"]["server_errors"] == 5


async def _alias_id(settings: Settings, adapter: str) -> UUID:
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        found = await session.scalar(
            select(AdapterAlias.id).join(Adapter).where(Adapter.name == adapter)
        )
    await config.get_engine().dispose()
    assert found is not None
    return found
