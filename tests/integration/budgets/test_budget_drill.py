"""The budget drill: one key's daily budget across two API processes sharing PostgreSQL and
Redis, many concurrent streams from that key around its budget (a quarter of them cut short
by their client) through the stand-in engine, then every route that spends once the budget
is spent. Run with -s for the figures.

What must hold: the spend never passes the budget by more than the reservations in flight
(here, none are left when it is read), the money billed in the spend record equals what the
budget counted (cut streams included), and chat, completions, responses and fine-tuning are
each refused with 429 `budget_exceeded` naming the budget and its reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from loraplex.adapters.facts import facts_to_json
from loraplex.bench.server import api_process
from loraplex.settings import Settings
from tests.integration.conftest import wait_in_rotation
from tests.support.lora_files import TINY_BASE
from tests.support.operators import operator_key
from tests.support.stand_in_engine import stand_in_engine

BUDGET = Decimal("3.00")
# 0.01 per prompt token, 0.02 per completion token, 0.003 per training token.
PRICE = {"prompt": "10000", "completion": "20000", "training": "3000"}
STREAMS_PER_WAVE = 24  # per API process
CUT_EVERY = 4  # every 4th stream's client leaves after its first chunk
STREAM = {"max_tokens": 10, "stream": True,
          "messages": [{"role": "user", "content": "tokens=8 every=0.02"}]}  # fmt: skip


@dataclass
class Drill:
    """The two API processes, the operator's and the tenant's headers, the budget's id."""

    urls: tuple[str, str]
    ops: dict[str, str]
    auth: dict[str, str]
    tenant_id: str
    budget_id: str
    alerts: list[dict[str, Any]]  # what the webhook received
    figures: dict[str, Any] = field(default_factory=dict)

    def budget(self) -> dict[str, Any]:
        """The budget as the API shows it (spend read from Redis)."""
        path = f"/api/v1/tenants/{self.tenant_id}/budgets/{self.budget_id}"
        return dict(httpx.get(self.urls[1] + path, headers=self.auth, timeout=30).json())

    def billed(self) -> Decimal:
        """The money in the spend record (written by both processes' usage flushes)."""
        path = f"/api/v1/tenants/{self.tenant_id}/spend"
        return Decimal(
            httpx.get(self.urls[0] + path, headers=self.auth, timeout=30).json()["total"]
        )


@pytest.fixture(scope="module")
def drill(settings: Settings) -> Iterator[Drill]:
    alerts: list[dict[str, Any]] = []
    with webhook(alerts) as hook_url, stand_in_engine(TINY_BASE.name) as engine_url:
        env = replace(settings, engine_health_interval_s=1.0, budget_webhook_url=hook_url)
        with api_process(env.to_env()) as (first, _), api_process(env.to_env()) as (second, _):
            yield _set_up((first, second), operator_key(settings, "drill"), engine_url, alerts)


@contextlib.contextmanager
def webhook(received: list[dict[str, Any]]) -> Iterator[str]:
    """An HTTP server on loopback keeping the JSON bodies POSTed to it; its URL."""

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["content-length"])
            received.append(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/budget-alerts"
    finally:
        server.shutdown()


def _set_up(
    urls: tuple[str, str], operator_key: str, engine_url: str, alerts: list[dict[str, Any]]
) -> Drill:
    ops = {"Authorization": f"Bearer {operator_key}"}

    def post(path: str, body: dict[str, Any], headers: dict[str, str] = ops) -> Any:
        response = httpx.post(urls[0] + path, json=body, headers=headers, timeout=30)
        assert response.status_code in (200, 201, 409), response.text
        return response.json()

    post("/api/v1/base-models", {**facts_to_json(TINY_BASE), "source": "generated://"})
    httpx.put(
        f"{urls[0]}/api/v1/prices/{TINY_BASE.name}", json=PRICE, headers=ops
    ).raise_for_status()
    engine = post("/api/v1/engines", {
        "name": f"drill-{secrets.token_hex(2)}", "url": engine_url, "kind": "vllm",
        "base_model": TINY_BASE.name, "max_lora_rank": 64, "gpu_slots": 4, "host_slots": 8,
    })["id"]  # fmt: skip
    for url in urls:
        wait_in_rotation(url, ops, [engine])
    slug = f"drill-{secrets.token_hex(3)}"
    tenant = post("/api/v1/tenants", {"slug": slug, "name": slug, "plan": "enterprise"})["id"]
    key = post(f"/api/v1/tenants/{tenant}/api-keys",
               {"name": "drill", "scopes": ["admin", "inference", "fine-tune"]})  # fmt: skip
    auth = {"Authorization": f"Bearer {key['key']}"}
    budget = post(f"/api/v1/tenants/{tenant}/budgets", {
        "scope": "key", "subject_id": key["id"], "period": "day", "amount": str(BUDGET),
    }, auth)["id"]  # fmt: skip
    return Drill(urls, ops, auth, tenant, budget, alerts)


async def _stream(client: httpx.AsyncClient, url: str, auth: dict[str, str], cut: bool) -> str:
    """One chat stream: "ok", "cut" (left after its first chunk) or the refusal's code."""
    body = {**STREAM, "model": TINY_BASE.name}
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers=auth) as r:
        if r.status_code != 200:
            await r.aread()
            return str(r.json()["error"]["code"])
        async for line in r.aiter_lines():
            if cut and line.startswith("data: "):
                return "cut"
        return "ok"


async def _wave(drill: Drill) -> list[str]:
    async with httpx.AsyncClient(timeout=60) as client:
        calls = [
            _stream(client, url, drill.auth, cut=i % CUT_EVERY == 0)
            for url in drill.urls
            for i in range(STREAMS_PER_WAVE)
        ]
        return list(await asyncio.gather(*calls))


def test_concurrent_streams_from_one_key_never_spend_past_its_budget(drill: Drill) -> None:
    outcomes: list[str] = []
    most_spent = Decimal(0)
    for _ in range(20):  # waves until one admits nothing: the budget is spent
        wave = asyncio.run(_wave(drill))
        outcomes += wave
        spent = Decimal(drill.budget()["spent"])
        most_spent = max(most_spent, spent)
        assert spent <= BUDGET, f"spent {spent} of a {BUDGET} budget with nothing in flight"
        if not {"ok", "cut"} & set(wave):
            break
    assert set(outcomes) <= {"ok", "cut", "budget_exceeded"}, set(outcomes)
    assert outcomes.count("budget_exceeded") > 0 and outcomes.count("cut") > 0
    billed = _billed_once_flushed(drill, Decimal(drill.budget()["spent"]))
    drill.figures.update(
        budget=BUDGET, spent=most_spent, billed=billed, overshoot=max(Decimal(0), most_spent - BUDGET),
        streams=len(outcomes), finished=outcomes.count("ok"), cut=outcomes.count("cut"),
        refused=outcomes.count("budget_exceeded"),
    )  # fmt: skip
    assert billed == most_spent, "the spend record and the budget's counter disagree"
    path = f"/api/v1/tenants/{drill.tenant_id}/spend"
    rows = httpx.get(drill.urls[0] + path, headers=drill.auth, timeout=30).json()["rows"]
    drill.figures["records"] = [
        (r["requests"], r["prompt_tokens"], r["completion_tokens"], r["amount"]) for r in rows
    ]


def test_the_alert_went_out_once_from_two_processes(drill: Drill) -> None:
    path = f"/api/v1/tenants/{drill.tenant_id}/audit"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        entries = httpx.get(drill.urls[0] + path, headers=drill.auth, timeout=30).json()["items"]
        alerts = [e for e in entries if e["action"] == "budget.alert"]
        if alerts and drill.alerts:
            break
        time.sleep(0.5)
    assert len(alerts) == 1 and alerts[0]["details"]["budget_id"] == drill.budget_id
    assert [a["budget_id"] for a in drill.alerts] == [drill.budget_id]
    assert drill.alerts[0]["alert_at"] == "2.40" and drill.alerts[0]["currency"] == "USD"
    drill.figures["alerts"] = f"{len(alerts)} audit entry, {len(drill.alerts)} webhook POST"


def _billed_once_flushed(drill: Drill, spent: Decimal) -> Decimal:
    """The spend record's total, once both processes flushed (every 5 s)."""
    deadline = time.monotonic() + 20
    while (billed := drill.billed()) != spent and time.monotonic() < deadline:
        time.sleep(0.5)
    return billed


ROUTES = {
    "chat": ("/v1/chat/completions", {"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
    "completions": ("/v1/completions", {"max_tokens": 10, "prompt": "hi"}),
    "responses": ("/v1/responses", {"max_output_tokens": 16, "input": "hi"}),
    "chat stream": ("/v1/chat/completions", {**STREAM}),
}  # fmt: skip


@pytest.mark.parametrize("route", list(ROUTES))
def test_each_route_is_refused_once_the_budget_is_spent(drill: Drill, route: str) -> None:
    path, body = ROUTES[route]
    response = _until_refused(drill.urls[1] + path, {**body, "model": TINY_BASE.name}, drill)
    _assert_budget_refusal(drill, route, response)
    assert Decimal(drill.budget()["spent"]) <= BUDGET


def test_a_fine_tuning_job_is_refused_once_the_budget_is_spent(drill: Drill) -> None:
    _spend_the_rest(drill)
    rows = [{"messages": [{"role": "user", "content": f"q{i}"},
                          {"role": "assistant", "content": f"a{i}"}]} for i in range(10)]  # fmt: skip
    upload = httpx.post(
        f"{drill.urls[0]}/v1/files", headers=drill.auth, data={"purpose": "fine-tune"},
        files={"file": ("train.jsonl", "".join(json.dumps(r) + "\n" for r in rows))}, timeout=30,
    )  # fmt: skip
    assert upload.status_code == 200, upload.text
    body = {"model": TINY_BASE.name, "training_file": upload.json()["id"]}
    response = _until_refused(f"{drill.urls[1]}/v1/fine_tuning/jobs", body, drill)
    _assert_budget_refusal(drill, "fine-tuning", response)
    assert Decimal(drill.budget()["spent"]) <= BUDGET
    _print(drill)


def _until_refused(url: str, body: dict[str, Any], drill: Drill) -> httpx.Response:
    """The route's request, sent until it is refused: the budget is spent for it."""
    for _ in range(100):
        response = httpx.post(url, json=body, headers=drill.auth, timeout=30)
        if response.status_code == 429:
            return response
        assert response.status_code == 200, response.text
    raise AssertionError(f"{url} was never refused")


def _spend_the_rest(drill: Drill) -> None:
    """Small chat requests until one is refused."""
    small = {"model": TINY_BASE.name, "max_tokens": 1,
             "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    _until_refused(f"{drill.urls[0]}/v1/chat/completions", small, drill)


def _assert_budget_refusal(drill: Drill, route: str, response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert error["code"] == "budget_exceeded"
    assert drill.budget_id in error["message"] and "resets at" in error["message"]
    assert response.headers["x-loraplex-budget-reset"].endswith("T00:00:00Z")
    assert 0 < int(response.headers["retry-after"]) <= 86_400
    drill.figures.setdefault("routes", {})[route] = f"429 {error['code']}"


def _print(drill: Drill) -> None:
    f = drill.figures
    f["at the end"] = f"{drill.budget()['spent']} spent, {drill.billed()} billed so far"
    print("\nbudget drill (one key, two API processes, stand-in engine)")
    names = ("budget", "spent", "billed", "overshoot", "streams", "finished", "cut", "refused",
             "alerts")  # fmt: skip
    for name in (*names, "records", "at the end"):
        print(f"  {name:<10} {f.get(name)}")
    for route, outcome in f.get("routes", {}).items():
        print(f"  refused    {route:<12} {outcome}")


def test_a_price_change_on_one_process_holds_on_the_other_at_once(drill: Drill) -> None:
    _spend_the_rest(drill)
    free = {"prompt": "0", "completion": "0", "training": "0"}
    price = f"{drill.urls[0]}/api/v1/prices/{TINY_BASE.name}"
    httpx.put(price, json=free, headers=drill.ops, timeout=30).raise_for_status()
    body = {
        "model": TINY_BASE.name,
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "hi"}],
    }
    response = httpx.post(f"{drill.urls[1]}/v1/chat/completions", json=body,
                          headers=drill.auth, timeout=30)  # fmt: skip
    assert response.status_code == 200, response.text  # free: nothing to reserve
