"""The agent's registrar: registers while its engine answers, counts restarts, deregisters."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import httpx

from loraplex.serving.agent_registration import Registrar, Registration

REGISTRATION = Registration(
    name="gpu-7", url="http://10.0.0.7:30000", kind="sglang", base_model="tiny",
    agent_url="http://10.0.0.7:8200",
)  # fmt: skip


class Fake:
    """An API that records calls, and an engine that is up or down."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict]] = []
        self.engine_up = True
        self.restarts: list[None] = []

    def api(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        self.calls.append((request.method, request.url.path, body))
        assert request.headers["authorization"] == "Bearer t0ken"
        return httpx.Response(200, json={"engine_id": "e1", "heartbeat_s": 2.0})

    def engine(self, request: httpx.Request) -> httpx.Response:
        assert "authorization" not in request.headers  # the token is for the API only
        return httpx.Response(200 if self.engine_up else 503)


def registrar(fake: Fake) -> Registrar:
    api = httpx.AsyncClient(
        base_url="http://api", transport=httpx.MockTransport(fake.api),
        headers={"Authorization": "Bearer t0ken"},
    )  # fmt: skip
    probe = httpx.AsyncClient(transport=httpx.MockTransport(fake.engine))
    return Registrar("http://api", "t0ken", REGISTRATION, "http://127.0.0.1:30000/health",
                     http=api, probe=probe, on_restart=lambda: fake.restarts.append(None))  # fmt: skip


async def test_a_beat_registers_the_engine_and_takes_the_apis_heartbeat_interval() -> None:
    fake = Fake()
    agent = registrar(fake)
    await agent.beat()
    method, path, body = fake.calls[0]
    assert (method, path) == ("PUT", "/api/v1/agents/engines/gpu-7")
    assert body["url"] == REGISTRATION.url and body["engine_generation"] == 0
    assert agent.registered and agent.heartbeat_s == 2.0


async def test_an_engine_that_comes_back_is_reported_as_restarted() -> None:
    fake = Fake()
    agent = registrar(fake)
    await agent.beat()
    fake.engine_up = False
    await agent.beat()  # the agent lives on: still a heartbeat
    assert len(fake.calls) == 2 and fake.calls[-1][2]["engine_generation"] == 0
    fake.engine_up = True
    await agent.beat()
    assert fake.calls[-1][2]["engine_generation"] == 1 and len(fake.restarts) == 1


async def test_stopping_deregisters() -> None:
    fake = Fake()
    agent = registrar(fake)
    await agent.beat()
    await agent.stop()
    assert fake.calls[-1][:2] == ("DELETE", "/api/v1/agents/engines/gpu-7")
    assert not agent.registered


async def test_a_hanging_heartbeat_does_not_hide_an_engine_restart() -> None:
    """The API is cut off (its PUT hangs) while the engine goes down and comes back: the
    probes go on meanwhile, so the restart is counted and its adapters can be loaded back."""
    fake = Fake()
    api_cut = asyncio.Event()

    async def hanging_api(request: httpx.Request) -> httpx.Response:
        if api_cut.is_set():
            await asyncio.sleep(3600)
        return fake.api(request)

    agent = registrar(fake)
    agent.http = httpx.AsyncClient(
        base_url="http://api", transport=httpx.MockTransport(hanging_api),
        headers={"Authorization": "Bearer t0ken"},
    )  # fmt: skip
    await agent.beat()
    agent.heartbeat_s = 0.01
    api_cut.set()
    await agent.start()
    fake.engine_up = False
    await asyncio.sleep(0.1)
    fake.engine_up = True
    await asyncio.sleep(0.1)
    assert agent.engine_generation == 1 and len(fake.restarts) == 1
    agent.registered = False  # nothing to deregister from an API that does not answer
    await agent.stop()


async def test_each_registration_carries_the_agents_own_secret_and_no_log_shows_it() -> None:
    fake = Fake()
    agent = registrar(fake)
    agent.registration = replace(REGISTRATION, agent_secret="s" * 43)
    await agent.beat()
    await agent.beat()
    assert [call[2]["agent_secret"] for call in fake.calls] == ["s" * 43] * 2
    assert "s" * 43 not in repr(agent.registration)


async def test_a_registration_without_a_secret_sends_none() -> None:
    fake = Fake()
    await registrar(fake).beat()
    assert "agent_secret" not in fake.calls[0][2]  # as agents before it: old APIs take it
