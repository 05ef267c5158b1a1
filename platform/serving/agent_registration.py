"""The agent's side of self-registration: register, heartbeat, notice restarts, deregister.

`loraplex agent --register-with <API URL>` runs a `Registrar` beside its HTTP server. Every
`heartbeat_s` it probes its engine, and, in a loop of its own so that a slow API never delays
the probes, PUTs the same registration to the API (the first PUT registers, the next ones
are heartbeats, sent whether the engine answers or not). Each heartbeat carries what the
probe saw (`engine_healthy`): the agent is the engine's one health prober, so API processes
need not run a health check (on SGLang a generation) each; a change is sent at once rather
than at the next beat. It also carries `draining` once `/drain` began (agent_drain.py). An engine
that was down and answers again has restarted and lost its adapters: the registrar counts it
in `engine_generation`, and the API, seeing the count change, has placement load again what
the engine held; a restarted engine is not draining any more. On shutdown it DELETEs the
registration, so the engine leaves rotation at once rather than when its heartbeat goes stale.
Each PUT carries the agent's own secret (`agent_secret`), which the API then sends back when it
calls this agent (auth/agent_token.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

log = logging.getLogger("loraplex.agent")


@dataclass(frozen=True)
class Registration:
    """The engine as the API should know it; URLs as API processes reach them."""

    name: str
    url: str
    kind: str
    base_model: str
    agent_url: str
    max_lora_rank: int = 64
    gpu_slots: int = 8
    host_slots: int = 32
    # Made at the agent's start (auth/agent_token.py): the API sends it back on every call
    # to this agent, which accepts it (and no other node's).
    agent_secret: str = field(default="", repr=False)


class Registrar:
    """Keeps the agent's engine registered with the API while the agent runs."""

    def __init__(
        self,
        api_url: str,
        credential: str,
        registration: Registration,
        engine_health_url: str,
        heartbeat_s: float = 5.0,
        http: httpx.AsyncClient | None = None,
        probe: httpx.AsyncClient | None = None,
        on_restart: Callable[[], None] = lambda: None,
    ):
        self.registration, self.engine_health_url = registration, engine_health_url
        self.heartbeat_s, self.on_restart = heartbeat_s, on_restart
        self.http = http or httpx.AsyncClient(
            base_url=api_url.rstrip("/"),
            headers={"Authorization": f"Bearer {credential}"},  # this node's, one engine name
            timeout=10,
        )
        self.probe = probe or httpx.AsyncClient(timeout=3)  # no token: it is not the API
        self.registered = False  # the API took the last PUT: /readyz answers 200
        self.engine_generation = 0
        self.draining = False  # /drain began: the API routes nothing new here
        self._engine_up: bool | None = None
        self._beat_now = asyncio.Event()  # the engine's state changed: heartbeat at once
        self._task: asyncio.Task[None] | None = None

    @property
    def engine_up(self) -> bool | None:
        """Whether the engine answered the last probe (None: not probed yet)."""
        return self._engine_up

    @property
    def path(self) -> str:
        """The registration's resource on the API."""
        return f"/api/v1/agents/engines/{self.registration.name}"

    async def start(self) -> None:
        """Start heartbeating in the background."""
        self._task = asyncio.create_task(self._run(), name="agent-registrar")

    async def stop(self) -> None:
        """Stop heartbeating and deregister (best effort: the API forgets it later anyway)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.registered:
            try:
                await self.http.delete(self.path)
            except httpx.HTTPError as exc:
                log.warning("could not deregister %s: %s", self.registration.name, exc)
        self.registered = False
        await self.http.aclose()
        await self.probe.aclose()

    async def beat(self) -> None:
        """One round: probe the engine, then register or heartbeat."""
        await self.watch_engine()
        await self.heartbeat()

    async def watch_engine(self) -> None:
        """Probe the engine; one that answers again after it did not has restarted."""
        up = await self._engine_answers()
        if up and self._engine_up is False:
            self.engine_generation += 1  # it was down: a restart, whatever caused it
            self.draining = False  # a fresh engine takes requests again
            log.info("engine came back (generation %d)", self.engine_generation)
            self.on_restart()  # what the agent knew loaded there is gone
        if up != self._engine_up:
            self._beat_now.set()
        self._engine_up = up

    async def start_draining(self) -> bool:
        """Tell the API now that the engine is draining; whether the API took it."""
        self.draining = True
        return await self.heartbeat()

    async def heartbeat(self) -> bool:
        """Register, or heartbeat, with the engine's generation, health and drain as last
        seen; whether the API took it."""
        # Heartbeats go on while the engine is down: they say the agent (the node) lives, so
        # the API keeps the engine's row; the health they report keeps it out of rotation.
        body: dict[str, Any] = asdict(self.registration)
        body.pop("name")
        if not body["agent_secret"]:
            body.pop("agent_secret")
        body["engine_generation"] = self.engine_generation
        body["engine_healthy"] = self._engine_up  # None until probed: the API probes it
        body["draining"] = self.draining
        try:
            response = await self.http.put(self.path, json=body)
        except httpx.HTTPError as exc:
            log.warning("API unreachable for registration: %s", exc)
            return False
        if response.status_code != 200:
            self.registered = False
            log.error("the API refused the registration (%s): %s", response.status_code,
                      response.text[:500])  # fmt: skip
            return False
        if not self.registered:
            log.info("registered engine %s as %s", self.registration.name,
                     response.json().get("engine_id"))  # fmt: skip
        self.registered = True
        self.heartbeat_s = float(response.json().get("heartbeat_s", self.heartbeat_s))
        return True

    async def _engine_answers(self) -> bool:
        try:
            response = await self.probe.get(self.engine_health_url)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def _run(self) -> None:
        # Two loops, not one: a heartbeat to an API that is slow or cut off may wait out its
        # timeout, and the engine's probes must go on meanwhile, or a restart shorter than
        # that wait would go unseen (and its adapters never be loaded back).
        with contextlib.suppress(Exception):  # the first heartbeat reports a probed engine
            await self.watch_engine()
        # A change of the engine's health wakes the heartbeat loop: told now, not a beat late.
        await asyncio.gather(
            self._every_beat(self.watch_engine, asyncio.Event()),
            self._every_beat(self.heartbeat, self._beat_now),
        )

    async def _every_beat(self, step: Callable[[], Awaitable[object]], wake: asyncio.Event) -> None:
        while True:
            try:
                await step()
            except Exception:  # one bad round must not end the loop
                log.exception("registration round failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self.heartbeat_s)
            wake.clear()
