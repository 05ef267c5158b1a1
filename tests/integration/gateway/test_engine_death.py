"""An engine killed in the middle of a stream, with no other engine to continue the answer on,
ends the stream with an error event, not a hang (with another engine the answer goes on
there: tests/integration/gateway/test_failover.py, docs/failover.md).

A second engine process is started for this (the session's shared engine stays up), under its
own base-model name so the gateway routes the doomed stream only to it, and has no other
engine to fail over to.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loraplex.adapters.facts import facts_to_json, read_base_model_facts
from loraplex.serving.engines.launcher import EngineConfig, read_pid, start_engine, stop_engine
from tests.integration.conftest import Served
from tests.integration.gateway.streams import parse_events

pytestmark = pytest.mark.engine


@pytest.fixture
def served(served_each: Served) -> Served:
    """Every test here runs on each engine kind (SGLang, vLLM)."""
    return served_each


DOOMED_BASE = "loraplex-tiny-doomed"
PORTS = {"sglang": 8101, "vllm": 8111}  # a doomed engine per kind; the shared ones stay up


@pytest.fixture
def doomed_engine(served: Served) -> Iterator[EngineConfig]:
    config = EngineConfig(
        kind=served.kind,
        model_dir=served.engine.model_dir,
        port=PORTS[served.kind],
        state_dir=Path(f"var/engine-doomed-{served.kind}"),
        max_loras=1,
        max_cpu_loras=1,
    )
    start_engine(config, say=lambda line: print(f"[doomed engine] {line}"))
    facts = {
        **facts_to_json(read_base_model_facts(served.engine.model_dir)),
        "name": DOOMED_BASE,
        "source": str(served.engine.model_dir),
    }
    httpx.post(f"{served.url}/api/v1/base-models", json=facts, headers=served.operator())
    engine = httpx.post(
        f"{served.url}/api/v1/engines",
        headers=served.operator(),
        json={
            "name": f"doomed-{secrets.token_hex(3)}",
            "url": config.url,
            "kind": served.kind,
            "base_model": DOOMED_BASE,
            "max_lora_rank": 64,
            "gpu_slots": 1,
            "host_slots": 1,
        },
    ).json()
    try:
        _wait_in_rotation(served, engine["id"])
        _warm_up(served)
        yield config
    finally:
        httpx.delete(f"{served.url}/api/v1/engines/{engine['id']}", headers=served.operator())
        stop_engine(config, grace_s=5)


def _wait_in_rotation(served: Served, engine_id: str) -> None:
    for _ in range(60):
        live = (
            httpx.get(f"{served.url}/api/v1/engines/{engine_id}", headers=served.operator())
            .json()
            .get("live")
        )
        if live and live["in_rotation"]:
            return
        time.sleep(0.5)
    raise AssertionError("the second engine never came into rotation")


def _warm_up(served: Served) -> None:
    """One short request first: a fresh engine's first one can pause mid-stream (vLLM on
    CPU compiles on it), and a pause past the gateway's idle timeout would end the doomed
    stream before the test kills anything."""
    body = {
        "model": DOOMED_BASE,
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 4,
        "temperature": 0,
    }
    response = httpx.post(
        f"{served.url}/v1/chat/completions", json=body, headers=served.headers(), timeout=120
    )
    assert response.status_code == 200, response.text


def test_killing_the_only_engine_mid_stream_ends_with_an_error_event(
    served: Served, doomed_engine: EngineConfig
) -> None:
    body = {
        "model": DOOMED_BASE,
        "messages": [{"role": "user", "content": "Once upon a time"}],
        "max_tokens": 3000,
        "temperature": 0,
        "stream": True,
    }
    received, status = b"", None
    killed_at = None
    with (
        httpx.Client(timeout=60) as http,
        http.stream(
            "POST", f"{served.url}/v1/chat/completions", json=body, headers=served.headers()
        ) as response,
    ):
        status = response.status_code
        for chunk in response.iter_raw():
            received += chunk
            # Count data events, not blank lines or keep-alive comments.
            if killed_at is None and len(parse_events(received)) >= 10:
                os.killpg(read_pid(doomed_engine), signal.SIGKILL)
                killed_at = time.monotonic()
    ended_after = time.monotonic() - (killed_at or time.monotonic())
    events = parse_events(received)
    assert killed_at is not None and len(events) >= 10, (
        f"the stream ended before the kill: HTTP {status}, {len(events)} events, "
        f"ending {received[-600:]!r}"
    )
    last = events[-1].json()
    assert last["error"]["code"] in {"engine_died", "engine_unavailable"}, last
    message = last["error"]["message"]
    assert "127.0.0.1" not in message and "http" not in message and "Error" not in message, (
        "the client's error names engine internals: " + message
    )
    assert ended_after < 15, f"the stream hung for {ended_after:.1f}s after the engine died"
