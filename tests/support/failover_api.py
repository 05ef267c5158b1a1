"""An API process with two engines of one base model, a tenant, and its streamed chats: what
the failover tests drive (stand-in engines in tests/integration/gateway/test_failover.py,
real SGLang and vLLM ones in test_sglang_failover.py and test_vllm_failover.py).

For the real engines: start two of a kind under their own base-model name (so the gateway
routes these streams only to them), stream a greedy chat and SIGKILL the engine serving it
after a number of the client's events, and check what the client read.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from loraplex.adapters.facts import BaseModelFacts, facts_to_json, read_base_model_facts
from loraplex.bench.server import api_process
from loraplex.serving.engines.launcher import EngineConfig, read_pid, start_engine, stop_engine
from loraplex.settings import Settings
from tests.conftest import SCRAPE
from tests.integration.conftest import wait_in_rotation
from tests.integration.gateway.streams import Event, parse_events
from tests.support.operators import operator_key

PROMPT = "Once upon a time"
# The API's log line for a failover (gateway/failover.py): the tokens the client had.
LEFT_AFTER = re.compile(r"engine \S+ left after (\d+) tokens")


@dataclass(frozen=True)
class FailoverApi:
    """The API's URL, the operator's and the tenant's headers, the engines' ids, the base."""

    url: str
    ops: dict[str, str]
    auth: dict[str, str]
    engines: list[str]
    model: str
    tokens: int  # how long every chat's answer is

    def chat(self, content: str, **body: Any) -> dict[str, Any]:
        """A streamed greedy chat body for `content`, with usage, `tokens` long."""
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": self.tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            **body,
        }

    def stream(self, body: dict[str, Any]) -> list[Event]:
        """Every event of the stream, once every engine is in rotation."""
        wait_in_rotation(self.url, self.ops, self.engines)
        response = httpx.post(
            f"{self.url}/v1/chat/completions", json=body, headers=self.auth, timeout=60
        )
        assert response.status_code == 200, response.text
        return parse_events(response.content)


def set_up(
    url: str,
    operator: str,
    engine_urls: list[str],
    *,
    base: BaseModelFacts,
    source: str,
    kind: str,
    tokens: int,
) -> FailoverApi:
    """Register `base` and the engines (of `kind`) serving it, and a tenant with a key."""
    ops = {"Authorization": f"Bearer {operator}"}
    _created(url, ops, "/api/v1/base-models", {**facts_to_json(base), "source": source})
    engines = [
        _created(url, ops, "/api/v1/engines", {
            "name": f"failover-{secrets.token_hex(2)}", "url": engine_url, "kind": kind,
            "base_model": base.name, "max_lora_rank": 64, "gpu_slots": 4, "host_slots": 8,
        })["id"]
        for engine_url in engine_urls
    ]  # fmt: skip
    slug = f"failover-{secrets.token_hex(3)}"
    tenant = {"slug": slug, "name": slug, "plan": "enterprise"}
    tenant_id = _created(url, ops, "/api/v1/tenants", tenant)["id"]
    key = {"name": "failover", "scopes": ["inference"]}
    secret = _created(url, ops, f"/api/v1/tenants/{tenant_id}/api-keys", key)["key"]
    return FailoverApi(url, ops, {"Authorization": f"Bearer {secret}"}, engines, base.name, tokens)


def _created(url: str, ops: dict[str, str], path: str, body: dict[str, Any]) -> Any:
    """POST as the operator; the thing made (or already there)."""
    response = httpx.post(url + path, json=body, headers=ops, timeout=30)
    assert response.status_code in (200, 201, 409), response.text
    return response.json()


def chunks(events: list[Event]) -> list[dict[str, Any]]:
    """The JSON chunks of a chat stream."""
    return [e.json() for e in events if e.data != "[DONE]"]


def text(events: list[Event]) -> str:
    """The answer's text."""
    return "".join(
        c["delta"].get("content") or "" for chunk in chunks(events) for c in chunk["choices"]
    )


def finishes(events: list[Event]) -> list[str]:
    """Every finish reason the stream gave."""
    return [
        c["finish_reason"]
        for chunk in chunks(events)
        for c in chunk["choices"]
        if c["finish_reason"]
    ]


@dataclass(frozen=True)
class Drill:
    """Two real engines of a kind behind an API, and the answer no failure cut."""

    configs: list[EngineConfig]
    api: FailoverApi
    uninterrupted: list[Event]
    prompt: str
    api_log: Path  # the API process's output

    def serving(self) -> EngineConfig:
        """The engine the API streams from now, by its own count of requests in flight
        (an engine's own gauges lag, and still count a request the gateway has aborted)."""
        api = self.api
        for engine_id, config in zip(api.engines, self.configs, strict=True):
            url = f"{api.url}/api/v1/engines/{engine_id}"
            live = httpx.get(url, headers=api.ops, timeout=5).json().get("live") or {}
            if live.get("in_flight"):
                return config
        raise AssertionError("the API streams from no engine")

    def tokens_at_failovers(self) -> list[int]:
        """For each failover so far, the answer's tokens the client had: the API's count."""
        return [int(m[1]) for m in LEFT_AFTER.finditer(self.api_log.read_text(errors="replace"))]


@contextmanager
def failover_drill(
    settings: Settings,
    kind: str,
    ports: tuple[int, int],
    base_name: str,
    tokens: int,
    prompt: str = PROMPT,
) -> Iterator[Drill]:
    """Two engines of `kind` on `ports` (the shared engines keep theirs) registered under
    `base_name` (the development model's facts) with an API process that polls their health
    every second; the engines are stopped after. Every chat asks `prompt`."""
    configs = [
        EngineConfig(kind=kind, port=port, state_dir=Path(f"var/engine-failover-{port}"))
        for port in ports
    ]
    live = replace(settings, engine_health_interval_s=1.0)
    base = replace(read_base_model_facts(configs[0].model_dir), name=base_name)
    try:
        for config in configs:
            start_engine(config, say=lambda line: print(f"[failover engine] {line}"))
        with api_process(live.to_env()) as (url, pid):
            api = set_up(
                url, operator_key(settings, base_name), [c.url for c in configs],
                base=base, source=str(configs[0].model_dir), kind=kind, tokens=tokens,
            )  # fmt: skip
            log = Path(os.readlink(f"/proc/{pid}/fd/1"))  # api_process's temporary file
            yield Drill(configs, api, api.stream(api.chat(prompt)), prompt, log)
    finally:
        for config in configs:
            stop_engine(config, grace_s=5)


def failovers(metrics: str, outcome: str) -> float:
    """Failovers with `outcome` so far, from the API's metrics text."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("loraplex_stream_failovers_total{") and f'outcome="{outcome}"' in line
    )


def continued(api: FailoverApi, outcome: str = "continued") -> float:
    """Streams continued on another engine so far (or failovers with another `outcome`), by
    the API's own count."""
    return failovers(httpx.get(f"{api.url}/metrics", headers=SCRAPE, timeout=10).text, outcome)


def stream_killing_at(
    drill: Drill, reached: Callable[[list[Event]], bool], extra: dict[str, Any] | None = None
) -> tuple[list[Event], float, int]:
    """Stream the chat (its body with `extra`), SIGKILL its engine once the events read have
    `reached` the cut; the events, the longest pause between two of them after the kill, and
    the events before it."""
    api, configs = drill.api, drill.configs
    for config in configs:  # one killed by the previous cut starts again; a live one is kept
        start_engine(config, say=print)
    wait_in_rotation(api.url, api.ops, api.engines)
    received, killed, kill_index, serving_now = b"", None, 0, None
    arrivals: list[float] = []
    with (
        httpx.Client(timeout=60) as http,
        http.stream(
            "POST",
            f"{api.url}/v1/chat/completions",
            json={**api.chat(drill.prompt), **(extra or {})},
            headers=api.auth,
        ) as response,
    ):
        assert response.status_code == 200
        for raw in response.iter_raw():
            received += raw
            read = parse_events(received[: received.rfind(b"\n\n") + 2])  # whole events
            arrivals += [time.monotonic()] * (len(read) - len(arrivals))
            if serving_now is None and read:  # found early, so the cut itself is instant
                with contextlib.suppress(AssertionError):  # not sent to an engine yet
                    serving_now = drill.serving()
            if killed is None and reached(read):
                killed = serving_now or drill.serving()
                os.killpg(read_pid(killed), signal.SIGKILL)
                kill_index = len(arrivals)
    assert killed is not None, "the stream ended before the kill"
    after = arrivals[kill_index - 1 :]
    return (
        parse_events(received),
        max((b - a for a, b in itertools.pairwise(after)), default=0.0),
        kill_index,
    )


# Where each cut falls: the share of the answer's text the client has read.
CUTS = {"first": 0.0, "mid": 0.5, "near_end": 0.8}


def check_cut(drill: Drill, cut: str) -> None:
    """Kill the serving engine `cut` (of CUTS) into the answer: the client reads the
    uninterrupted answer, billed once, continued on the other engine. Prints where the cut
    fell, the gap the client saw and the tokens billed."""
    api, configs, uninterrupted = drill.api, drill.configs, drill.uninterrupted
    # By text, not events: the gateway may send several tokens in one event.
    whole = len(text(uninterrupted))
    before = continued(api)
    events, gap, kill_index = stream_killing_at(
        drill, lambda read: len(text(read)) > CUTS[cut] * whole
    )
    assert text(events) == text(uninterrupted) != ""
    assert continued(api) == before + 1, "the engine was killed after its answer had ended"
    assert finishes(events) == ["length"] and events[-1].data == "[DONE]"
    usage = chunks(events)[-1]["usage"]
    assert usage == chunks(uninterrupted)[-1]["usage"]  # each token billed once
    assert usage["completion_tokens"] == api.tokens
    had = drill.tokens_at_failovers()[-1]  # where the continuation started, by the API
    print(
        f"\n{configs[0].kind}: cut after {had} of {api.tokens} tokens (the API's count), "
        f"{kill_index} of {len(events)} events, "
        f"{len(text(events[:kill_index])) / whole:.0%} of the text: gap {gap * 1000:.0f} ms, "
        f"billed {usage['completion_tokens']} of {api.tokens}"
    )


WEATHER_TOOL = {
    "type": "function",
    "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}},
}


def check_tools_cut(drill: Drill) -> None:
    """docs/failover.md: a request offered tools is not continued (a call cut mid-arguments
    would be parsed from its middle): the client keeps the text so far, then reads the error
    event, which names no engine internals."""
    before = continued(drill.api, "tools")
    offered = {"tools": [WEATHER_TOOL], "tool_choice": "auto"}
    events, _, kill_index = stream_killing_at(drill, lambda read: len(text(read)) > 0, offered)
    error = events[-1].json()["error"]
    assert error["code"] == "engine_died", error
    assert "127.0.0.1" not in error["message"] and "http" not in error["message"]
    assert continued(drill.api, "tools") == before + 1
    assert text(events[:-1]) != ""
    print(f"\n{drill.configs[0].kind}, tools offered: cut after {kill_index} of {len(events)} "
          f"events -> {error['code']}")  # fmt: skip
