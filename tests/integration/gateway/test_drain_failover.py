"""Draining an engine moves its long streams to another engine: the drain ends as soon as
they have moved, not when they would have ended, and the client reads the uninterrupted
answer. A stream that cannot be continued exactly finishes on the draining engine.

Two stand-in engines (tests/system/fake_engine.py), each with a real `loraplex agent`
beside it, behind one API process. The streams start while only engine A is up (so every
one is on A); engine B's agent then registers it, and A's agent is asked to drain, as a
pod's preStop hook asks it (`POST /drain`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from loraplex.bench.server import api_process, free_port
from loraplex.settings import Settings
from tests.integration.engines.test_agent_registration import (
    in_rotation,
    mint_credential,
    wait_for,
)
from tests.integration.finetune.conftest import Process
from tests.integration.gateway.streams import Event
from tests.support.failover_api import FailoverApi, chunks, finishes, set_up, text
from tests.support.lora_files import TINY_BASE
from tests.support.operators import operator_key
from tests.support.stand_in_engine import stand_in_engine

TOKENS = 160
PROMPT = f"greedy tokens={TOKENS} every=0.05"  # 8 s of answer, uninterrupted
STREAMS = 3


class Node:
    """A stand-in engine and its agent, registered under `name`."""

    def __init__(self, api: str, operator: str, settings: Settings, engine_url: str, name: str):
        self.name, self.engine_url = name, engine_url
        port = free_port()
        self.agent_url = f"http://127.0.0.1:{port}"
        env = {
            **settings.to_env(),
            "LORAPLEX_AGENT_TOKEN": "",
            "LORAPLEX_NODE_CREDENTIAL": mint_credential(api, operator, name),
            "LORAPLEX_DATA_DIR": str(Path(settings.data_dir) / f"agent-{name}"),
        }
        args = ["agent", "--engine-url", engine_url, "--engine-kind", "vllm",
                "--port", str(port), "--register-with", api, "--name", name,
                "--base-model", TINY_BASE.name, "--gpu-slots", "4", "--host-slots", "8"]  # fmt: skip
        self.agent = Process(args, env).start()
        wait_for(f"{name} in rotation", lambda: in_rotation(api, operator, name))

    def drain(self) -> dict[str, Any]:
        """What the preStop hook gets from the agent's `POST /drain`."""
        reply = httpx.post(f"{self.agent_url}/drain", timeout=120)
        assert reply.status_code == 200, reply.text
        return dict(reply.json())

    def served(self) -> int:
        """Streams the engine has ended (finished or cut)."""
        return int(httpx.get(f"{self.engine_url}/stats", timeout=5).json()["served"])

    def streaming(self) -> int:
        return int(httpx.get(f"{self.engine_url}/stats", timeout=5).json()["streaming"])


@pytest.fixture(scope="module")
def api(settings: Settings) -> Iterator[tuple[FailoverApi, str, Settings]]:
    """An API process with the stand-in's base model and a tenant; no engine yet."""
    live = replace(settings, engine_health_interval_s=1.0)
    with api_process(live.to_env()) as (url, _):
        operator = operator_key(settings, "drain")
        yield (
            set_up(url, operator, [], base=TINY_BASE, source="generated://", kind="vllm",
                   tokens=TOKENS),
            operator,
            live,
        )  # fmt: skip


@pytest.fixture
def engines(api: tuple[FailoverApi, str, Settings]) -> Iterator[tuple[str, str]]:
    """Two stand-in engines' URLs: A and B."""
    with (
        stand_in_engine(TINY_BASE.name, "a") as a,
        stand_in_engine(TINY_BASE.name, "b") as b,
    ):
        yield a, b


@dataclass(frozen=True)
class Drill:
    """The drain's answer, the uninterrupted stream's time, the time from the drain's start
    to when the streams would have ended on A, and the streams B ended."""

    answer: dict[str, Any]
    uninterrupted_s: float
    left_on_a_s: float
    served_by_b: int


def _drill(api: tuple[FailoverApi, str, Settings], engines: tuple[str, str], **body: Any) -> Drill:
    """Stream the chat uninterrupted on A alone (timed), then `STREAMS` of it on A, bring
    B up and drain A; every stream reads as the uninterrupted answer, its usage as received."""
    failover, operator, settings = api
    suffix = secrets.token_hex(2)
    a = Node(failover.url, operator, settings, engines[0], f"drain-a-{suffix}")
    nodes = [a]
    try:
        started = time.monotonic()
        alone = failover.stream(failover.chat(PROMPT, **body))
        uninterrupted_s = time.monotonic() - started
        with ThreadPoolExecutor(STREAMS) as pool:
            started = time.monotonic()
            streams: list[Future[list[Event]]] = [
                pool.submit(failover.stream, failover.chat(PROMPT, **body)) for _ in range(STREAMS)
            ]
            wait_for("the streams on A", lambda: a.streaming() == STREAMS, 10)
            b = Node(failover.url, operator, settings, engines[1], f"drain-b-{suffix}")
            nodes.append(b)
            drain_began = time.monotonic()
            answer = a.drain()
            left_on_a_s = started + uninterrupted_s - drain_began
            events = [s.result() for s in streams]
        for got in events:
            assert text(got) == text(alone) != "", "the answer changed"
            assert finishes(got) == ["length"] and got[-1].data == "[DONE]"
            usage = chunks(got)[-1]["usage"]
            assert usage["completion_tokens"] == len(text(got).split()) == TOKENS
        return Drill(answer, uninterrupted_s, left_on_a_s, b.served())
    finally:
        for node in nodes:
            node.agent.stop()


def test_a_drain_moves_long_streams_and_ends_once_they_moved(
    api: tuple[FailoverApi, str, Settings], engines: tuple[str, str]
) -> None:
    drill = _drill(api, engines)
    waited_s = drill.answer["waited_s"]
    print(
        f"\nuninterrupted stream {drill.uninterrupted_s:.1f}s; drain ended after {waited_s:.1f}s"
        f" of the {drill.left_on_a_s:.1f}s the streams had left on A"
    )
    assert drill.answer["drained"] is True and drill.served_by_b == STREAMS
    # The drain waited for the move, not for the answers: well under the time they had left.
    assert waited_s < drill.left_on_a_s / 2


def test_a_stream_that_cannot_be_continued_finishes_on_the_draining_engine(
    api: tuple[FailoverApi, str, Settings], engines: tuple[str, str]
) -> None:
    drill = _drill(api, engines, presence_penalty=0.5)
    assert drill.answer["drained"] is True and drill.served_by_b == 0  # none went to B
    assert drill.answer["waited_s"] >= drill.left_on_a_s * 0.8  # it held for their ends
