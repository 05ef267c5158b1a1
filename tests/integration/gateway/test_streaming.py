"""SSE behaviour under slow readers, disconnects and cut streams, against the real engine."""

from __future__ import annotations

import itertools
import json
import statistics
import time
from collections.abc import Iterator

import httpx
import pytest

from loraplex.dev.partial_characters import steady_stream_bias
from tests.integration.conftest import BASE, Served
from tests.integration.gateway.streams import parse_events, raw_stream_request, read_all
from tests.support.engine_metrics import wait_until_busy, wait_until_idle

pytestmark = pytest.mark.engine


@pytest.fixture
def served(served_each: Served) -> Served:
    """Every test here runs on each engine kind (SGLang, vLLM)."""
    return served_each


LONG = {
    "model": BASE,
    "messages": [{"role": "user", "content": "Once upon a time"}],
    "max_tokens": 3000,
    "temperature": 0,
    "stream": True,
}
STEPS_SEEN = 8  # events read to time the engine's steps before the client leaves
ABORT_WITHIN_STEPS = 40
ABORT_AT_MOST_S = 5.0


def _long(served: Served) -> dict:
    """A long greedy stream of the base model, kept steady (loraplex.dev.partial_characters)."""
    return {**LONG, "model": served.base, "logit_bias": steady_stream_bias(served.engine.model_dir)}


def test_slow_reader_gets_coalesced_events_then_slow_client_and_the_engine_stops(
    served: Served,
) -> None:
    # A request an earlier test left running would share the engine's KV pool and step time.
    assert wait_until_idle(served.engines, 120) is not None, "the engines were busy before"
    # The generated model may end a reply early (EOS) before the buffers fill; such a reply
    # ends with [DONE] and says nothing about slow readers, so another prompt is tried. So is
    # one the engine stalled on for a whole idle timeout (seen once on a loaded CI host): it
    # says nothing about slow readers either, and the next try shows whether it persists.
    stalls = []
    for prompt in ("Once upon a time", "The list of numbers goes on:", "Tell me more"):
        body = {**_long(served), "messages": [{"role": "user", "content": prompt}]}
        sock = raw_stream_request(served.url, served.key, body)
        time.sleep(2)  # read nothing while the engine generates: socket buffers fill, then ours
        stopped_after = wait_until_idle(served.engines, 60)
        assert stopped_after is not None, "the engine request was not aborted"
        events = parse_events(read_all(sock))
        sock.close()
        if events[-1].data != "[DONE]" and "idle_timeout" not in events[-1].data:
            break
        if "idle_timeout" in events[-1].data:
            stalls.append(_log_tails(served))
    assert events[-1].data != "[DONE]", "every reply ended before the buffers filled"
    assert "idle_timeout" not in events[-1].data, "the engine stalled every time:\n" + stalls[-1]
    payloads = [e.json() for e in events]
    assert "error" in payloads[-1], payloads[-1]
    assert payloads[-1]["error"]["code"] == "slow_client", payloads[-1]
    texts = [p["choices"][0]["delta"].get("content", "") for p in payloads[:-1] if p.get("choices")]
    typical = sorted(len(t) for t in texts)[len(texts) // 2]
    assert max(len(t) for t in texts) >= 20 * max(typical, 1), "no event carried coalesced text"


def _log_tails(served: Served, lines: int = 40) -> str:
    """The engines' last log lines, for a failure message."""
    tails = []
    for engine in served.engines:
        log = (engine.state_dir / "engine.log").read_text(errors="replace").splitlines()
        tails.append(f"--- {engine.url}\n" + "\n".join(log[-lines:]))
    return "\n".join(tails)


def test_client_disconnect_aborts_the_engine_request_within_a_few_steps(served: Served) -> None:
    assert wait_until_idle(served.engines, 120) is not None, "the engines were busy before"
    # A reply the generated model ends early (EOS) leaves nothing running to abort; such a
    # try says nothing about disconnects, so another prompt is tried.
    for prompt in ("Once upon a time", "The list of numbers goes on:", "Tell me more"):
        body = {**_long(served), "messages": [{"role": "user", "content": prompt}]}
        with (
            httpx.Client(timeout=30) as http,
            http.stream(
                "POST",
                f"{served.url}/v1/chat/completions",
                json=body,
                headers=served.headers(),
            ) as response,
        ):
            # Held while the engine is checked: a line iterator that is dropped closes the
            # connection, which is a disconnect, and the engine request is aborted at once.
            lines = response.iter_lines()
            first = _first_data_lines(lines, 2)
            times, rest = [time.monotonic()], []
            for _ in range(STEPS_SEEN):
                rest += _first_data_lines(lines, 1)
                times.append(time.monotonic())
            # This run's own pace: the median gap, so one stall does not widen the bound.
            step_s = statistics.median(b - a for a, b in itertools.pairwise(times))
            if _ended(first + rest):
                continue
            assert wait_until_busy(served.engines, 2), "the engine ran nothing mid-stream"
        break
    else:
        raise AssertionError(f"every reply ended within {STEPS_SEEN + 2} events")
    # The bound is the engine's own pace in this run, so a slow machine is not a failure:
    # a second, or ABORT_WITHIN_STEPS of its steps where those take longer, never more than
    # ABORT_AT_MOST_S. The request itself still had thousands of steps to go.
    bound_s = min(ABORT_AT_MOST_S, max(1.0, ABORT_WITHIN_STEPS * step_s))
    idle_after = wait_until_idle(served.engines, 5 * bound_s)
    assert idle_after is not None and idle_after <= bound_s, (
        f"engine still running {idle_after}s after disconnect (a step took {step_s:.3f}s)"
    )


def _ended(data_lines: list[str]) -> bool:
    """Whether these lines hold the reply's end: [DONE], an error or a finish reason."""
    for line in data_lines:
        payload = line.removeprefix("data: ")
        if payload == "[DONE]":
            return True
        chunk = json.loads(payload)
        if "error" in chunk or any(c.get("finish_reason") for c in chunk.get("choices", [])):
            return True
    return False


def _first_data_lines(lines: Iterator[str], count: int) -> list[str]:
    """The stream's next `count` data lines (fewer if it ends sooner)."""
    data = []
    for line in lines:
        if line.startswith("data: "):
            data.append(line)
            if len(data) >= count:
                break
    return data


def _cut_streams(served: Served) -> int:
    return httpx.get(
        f"{served.url}/api/v1/tenants/{served.tenant_id}/usage",
        params={"group_by": "day"},
        headers=served.headers(),
    ).json()["totals"]["cut_streams"]


def test_usage_is_recorded_for_a_cut_stream(served: Served) -> None:
    before = _cut_streams(served)
    with (
        httpx.Client(timeout=30) as http,
        http.stream(
            "POST",
            f"{served.url}/v1/chat/completions",
            json=_long(served),
            headers=served.headers(),
        ) as response,
    ):
        seen = 0
        for line in response.iter_lines():
            seen += line.startswith("data: ")
            if seen >= 20:
                break
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        report = httpx.get(
            f"{served.url}/api/v1/tenants/{served.tenant_id}/usage",
            params={"group_by": "day"},
            headers=served.headers(),
        ).json()
        if report["totals"]["cut_streams"] > before:
            assert report["totals"]["completion_tokens"] >= 19
            return
        time.sleep(1)
    raise AssertionError(f"no cut stream in usage: {report['totals']}")


def test_stream_events_carry_increasing_ids_and_end_with_done(served: Served) -> None:
    body = {
        **_long(served),
        "max_tokens": 12,
        "stream_options": {"include_usage": True},
    }
    with httpx.Client(timeout=30) as http:
        raw = http.post(
            f"{served.url}/v1/chat/completions", json=body, headers=served.headers()
        ).content
    assert raw.rstrip().endswith(b"data: [DONE]")
    events = [e for e in parse_events(raw) if e.data != "[DONE]"]
    ids = [e.id for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert events[-1].json()["usage"]["completion_tokens"] == 12
