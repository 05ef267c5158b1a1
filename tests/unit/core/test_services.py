"""The composition root: every long-lived part stops, in the reverse order of start-up, and
a start-up that fails half-way stops what had already started."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loraplex.changes import ChangeFeed
from loraplex.db import migrate
from loraplex.db.config import sqlalchemy_config
from loraplex.gateway.service import Gateway
from loraplex.gateway.usage import UsageRecorder
from loraplex.services import running_services
from loraplex.serving.disk_cache import DiskCache
from loraplex.serving.live import LivePlacement
from loraplex.serving.registry import EngineRegistry
from loraplex.settings import Settings

# The parts that run something in the background or hold connections, by their stop method.
STOPS = [
    (ChangeFeed, "stop", "changes"),
    (DiskCache, "aclose", "disk cache"),
    (EngineRegistry, "stop", "registry"),
    (LivePlacement, "stop", "placement"),
    (UsageRecorder, "stop", "usage"),
    (Gateway, "aclose", "gateway"),
]


@pytest.fixture
async def settings(tmp_path: Path) -> Settings:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path}/loraplex.db", data_dir=tmp_path
    )
    await asyncio.to_thread(migrate.upgrade, settings.database_url)
    return settings


@pytest.fixture
def stopped(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the parts stopped, in order."""
    order: list[str] = []
    for cls, method, name in STOPS:
        monkeypatch.setattr(cls, method, _spy(getattr(cls, method), name, order))
    return order


def _spy(stop: Callable[..., Any], name: str, order: list[str]) -> Callable[..., Any]:
    async def spied(self: Any, *args: Any, **kwargs: Any) -> Any:
        order.append(name)
        return await stop(self, *args, **kwargs)

    return spied


async def test_every_part_stops_in_the_reverse_order_of_start_up(
    settings: Settings, stopped: list[str]
) -> None:
    db = sqlalchemy_config(settings)
    try:
        async with running_services(settings, db) as services:
            assert services.gateway.resumable is not None  # built, not patched in after
    finally:
        await db.get_engine().dispose()
    # The gateway's pumps record usage, so it stops before the usage recorder writes the rest;
    # placement uses the registry's engines and the disk cache.
    assert stopped == ["gateway", "usage", "placement", "registry", "disk cache", "changes"]


async def test_a_start_up_that_fails_half_way_stops_what_had_started(
    settings: Settings, stopped: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: LivePlacement) -> None:
        raise RuntimeError("placement could not start")

    monkeypatch.setattr(LivePlacement, "start", broken)
    db = sqlalchemy_config(settings)
    try:
        with pytest.raises(RuntimeError, match="placement could not start"):
            async with running_services(settings, db):
                pytest.fail("the services must not be yielded")
    finally:
        await db.get_engine().dispose()
    assert stopped == ["registry", "disk cache", "changes"]
