"""The canary drill: an alias with an analysed canary, traffic through two API processes
sharing PostgreSQL and Redis, and the stand-in engine making the canary version fail or
slow (its `/misbehave` route). Run with -s for the table.

What must hold: a canary answering server errors, or slower past the TTFT ratio, is rolled
back before its window ends, once it has seen its minimum requests; a good one is promoted
once the window has passed; each decision is made once (one audit entry, though both
processes analyse) and carries the figures that led to it. A policy with a sample eval (the
tenant's opt-in) keeps a few live prompts and evaluates them on both versions on a Celery
worker: a canary whose answers fail the eval is rolled back with both pass rates; a policy
without one keeps no prompt.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from redis import Redis
from sqlalchemy import select

from loraplex.adapters.facts import facts_to_json
from loraplex.bench.server import api_process
from loraplex.control.canary.samples import KEY_PREFIX
from loraplex.db import migrate
from loraplex.db.config import sqlalchemy_config
from loraplex.db.models import Adapter, AdapterAlias
from loraplex.serving.loader import engine_adapter_name
from loraplex.settings import Settings
from tests.conftest import create_database, drop_database
from tests.integration.conftest import wait_in_rotation
from tests.integration.finetune.conftest import Process
from tests.support.lora_files import TINY_BASE, write_adapter
from tests.support.operators import operator_key
from tests.support.stand_in_engine import stand_in_engine

# The drill's own Celery broker: only its worker takes its eval runs.
BROKER_URL = os.environ.get("LORAPLEX_TEST_CANARY_BROKER", "redis://127.0.0.1:6379/11")
WINDOW_S = 20
MIN_REQUESTS = 16
ANALYSIS = {"window_s": WINDOW_S, "min_requests": MIN_REQUESTS,
            "max_error_rate_diff": 0.05, "max_ttft_p95_ratio": 2.0}  # fmt: skip
CHAT = {"max_tokens": 2, "messages": [{"role": "user", "content": "tokens=2 every=0.01"}]}
ENGINE_NAME = "stand-in"  # each token the stand-in answers, unless told to `say` another
# An eval that needs no reference answer: does the answer name the engine?
LIVE_EVAL = {
    "name": "names the engine",
    "data_source_config": {"type": "custom", "item_schema": {
        "type": "object", "properties": {"input": {"type": "array"}}, "required": ["input"]}},
    "testing_criteria": [{"type": "string_check", "name": "names", "operation": "ilike",
                          "input": "{{sample.output_text}}", "reference": ENGINE_NAME}],
}  # fmt: skip
TABLE: list[tuple[str, str, float, int, int, int]] = []


@dataclass
class Drill:
    """Two API processes, the stand-in engine, and a tenant's headers."""

    urls: tuple[str, str]
    engine_url: str
    ops: dict[str, str]
    auth: dict[str, str]
    tenant_id: str
    folder: Path
    engine_id: str = ""
    settings: Settings | None = None

    def call(self, method: str, path: str, url: int = 0, **kwargs: Any) -> Any:
        response = httpx.request(method, self.urls[url] + path, headers=self.auth, timeout=60,
                                 **kwargs)  # fmt: skip
        assert response.status_code in (200, 201), response.text
        return response.json()


@pytest.fixture(scope="module")
async def own_settings(settings: Settings) -> AsyncIterator[Settings]:
    """The suite's settings on a database, bucket and Celery broker of the drill's own. Every
    API process runs a canary analyst, and any of them may start a canary's sample evals:
    the in-process apps of earlier tests (alive for the session, on the suite's database)
    did, sending them to their own broker, whose worker had no eval API to call."""
    name = f"loraplex_canary_{secrets.token_hex(4)}"
    url = await create_database(name)
    await asyncio.to_thread(migrate.upgrade, url)
    with Redis.from_url(BROKER_URL) as broker:
        broker.flushdb()  # no message a killed run left on the drill's broker
    yield replace(
        settings,
        database_url=url,
        broker_url=BROKER_URL,
        s3_bucket=f"canary-{secrets.token_hex(4)}",
    )
    await drop_database(name)


@pytest.fixture(scope="module")
def drill(own_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drill]:
    settings = own_settings
    env = replace(settings, engine_health_interval_s=1.0, engine_admission=False).to_env()
    with (
        stand_in_engine(TINY_BASE.name) as engine_url,
        api_process(env) as (first, _),
        api_process(env) as (second, _),
    ):
        found = _set_up((first, second), engine_url, settings, tmp_path_factory.mktemp("canary"))
        found.settings = settings
        yield found
        # the stand-in engine goes with this module: later tests must not meet it registered
        httpx.delete(f"{first}/api/v1/engines/{found.engine_id}", headers=found.ops, timeout=30)
    _print()


def _set_up(urls: tuple[str, str], engine_url: str, settings: Settings, folder: Path) -> Drill:
    ops = {"Authorization": f"Bearer {operator_key(settings, 'canary')}"}

    def post(path: str, body: dict[str, Any], headers: dict[str, str] = ops) -> Any:
        response = httpx.post(urls[0] + path, json=body, headers=headers, timeout=30)
        assert response.status_code in (200, 201, 409), response.text
        return response.json()

    post("/api/v1/base-models", {**facts_to_json(TINY_BASE), "source": "generated://"})
    engine = post("/api/v1/engines", {
        "name": f"canary-{secrets.token_hex(2)}", "url": engine_url, "kind": "vllm",
        "base_model": TINY_BASE.name, "max_lora_rank": 64, "gpu_slots": 4, "host_slots": 8,
    })["id"]  # fmt: skip
    for url in urls:
        wait_in_rotation(url, ops, [engine])
    slug = f"canary-{secrets.token_hex(3)}"
    tenant = post("/api/v1/tenants", {"slug": slug, "name": slug, "plan": "enterprise"})["id"]
    key = post(
        f"/api/v1/tenants/{tenant}/api-keys", {"name": "d", "scopes": ["admin", "inference"]}
    )
    auth = {"Authorization": f"Bearer {key['key']}"}
    return Drill(urls, engine_url, ops, auth, tenant, folder, engine)


@pytest.fixture(scope="module")
def worker(drill: Drill) -> Iterator[Process]:
    """A Celery worker whose eval runs call the first API process (the sample evals)."""
    assert drill.settings is not None
    env = replace(drill.settings, eval_api_url=drill.urls[0]).to_env()
    process = Process(["worker", "-Q", "default", "-c", "1"], env).start()
    yield process
    process.stop()


def _canary(
    drill: Drill, fault: dict[str, Any], analysis: dict[str, Any] = ANALYSIS
) -> tuple[str, str]:
    """A new adapter with v1 behind `prod` and v2 its analysed canary at 50 %, v2 made to
    misbehave by `fault` on the engine; (the adapter's path, v2's engine name)."""
    name = f"c-{secrets.token_hex(3)}"
    adapters = f"/api/v1/tenants/{drill.tenant_id}/adapters"
    drill.call("POST", adapters, json={"name": name, "base_model": TINY_BASE.name})
    versions = [_upload(drill, f"{adapters}/{name}/versions", n) for n in (1, 2)]
    drill.call("PUT", f"{adapters}/{name}/aliases/prod", json={"version": 1})
    engine_name = engine_adapter_name(UUID(versions[1]["id"]))
    httpx.post(f"{drill.engine_url}/misbehave", json={"model": engine_name, **fault}, timeout=10)
    body = {"version": 2, "weight": 50, "analysis": analysis}
    alias = drill.call("PUT", f"{adapters}/{name}/aliases/prod/canary", json=body, url=1)
    assert alias["canary_version"] == 2 and alias["canary_analysis"]["window_s"] == WINDOW_S
    return f"{adapters}/{name}", name


def _upload(drill: Drill, path: str, n: int) -> dict[str, Any]:
    folder = drill.folder / secrets.token_hex(3)
    write_adapter(folder)
    files = [("file", (f, (folder / f).read_bytes())) for f in
             ("adapter_config.json", "adapter_model.safetensors")]  # fmt: skip
    return dict(drill.call("POST", path, files=files))


async def _traffic(
    drill: Drill, model: str, alias_path: str, within_s: float
) -> tuple[float, int, int]:
    """Requests through both processes until the alias has no canary: (seconds, requests
    sent, requests that failed)."""
    started, sent, failed = time.monotonic(), 0, 0
    deadline = started + within_s
    async with httpx.AsyncClient(headers=drill.auth, timeout=60) as client:
        while time.monotonic() < deadline:
            replies = await asyncio.gather(*[
                client.post(f"{url}/v1/chat/completions", json={**CHAT, "model": model})
                for url in drill.urls for _ in range(2)
            ])  # fmt: skip
            sent += len(replies)
            failed += sum(r.status_code != 200 for r in replies)
            alias = (await client.get(drill.urls[sent % 2] + alias_path)).json()
            if alias["canary_version"] is None:
                return time.monotonic() - started, sent, failed
            await asyncio.sleep(0.1)
    raise AssertionError(f"no decision within {within_s} s: {alias['canary_decision']}")


def _run(
    drill: Drill, case: str, fault: dict[str, Any], analysis: dict[str, Any] = ANALYSIS
) -> dict[str, Any]:
    path, name = _canary(drill, fault, analysis)
    # a sample eval waits for a worker (started with the test) to run both versions' evals
    within_s = WINDOW_S * (6 if "sample_eval" in analysis else 3)
    took, sent, failed = asyncio.run(
        _traffic(drill, f"{name}@prod", f"{path}/aliases/prod", within_s)
    )
    alias = drill.call("GET", f"{path}/aliases/prod")
    decision = alias["canary_decision"]
    audit = drill.call("GET", f"/api/v1/tenants/{drill.tenant_id}/audit?page_size=100")["items"]
    decided = [e for e in audit if e["action"].startswith("alias.canary_")
               and e["details"].get("adapter") == name]  # fmt: skip
    assert len(decided) == 1, f"two processes, {len(decided)} decisions: {decided}"
    seen = decision["figures"]["canary"]["requests"]
    TABLE.append((case, decision["verdict"], took, sent, seen, failed))
    kept = _kept_prompt_lists(drill, name)
    return {"alias": alias, "decision": decision, "took": took, "audit": decided[0], "kept": kept}


def _kept_prompt_lists(drill: Drill, adapter: str) -> int:
    """How many lists of kept live prompts Redis holds for the adapter's `prod` alias."""
    assert drill.settings is not None

    async def alias_id() -> UUID:
        config = sqlalchemy_config(drill.settings)  # type: ignore[arg-type]
        async with config.get_session() as session:
            found = await session.scalar(
                select(AdapterAlias.id).join(Adapter).where(
                    Adapter.name == adapter, AdapterAlias.name == "prod")
            )  # fmt: skip
        await config.get_engine().dispose()
        assert found is not None
        return found

    redis = Redis.from_url(drill.settings.redis_url)
    try:
        return len(redis.keys(f"{KEY_PREFIX}{asyncio.run(alias_id()).hex}:*"))
    finally:
        redis.close()


def test_a_canary_answering_server_errors_is_rolled_back_within_its_window(drill: Drill) -> None:
    outcome = _run(drill, "errors (500)", {"status": 500})
    assert outcome["decision"]["verdict"] == "rollback"
    assert outcome["alias"]["version"] == 1 and outcome["alias"]["canary_version"] is None
    assert outcome["took"] < WINDOW_S
    assert outcome["decision"]["figures"]["canary"]["requests"] >= MIN_REQUESTS
    assert "server-error rate" in outcome["audit"]["details"]["reasons"][0]
    assert outcome["kept"] == 0, "a policy without sample_eval keeps no live prompt"
    assert "sample_eval" not in outcome["decision"]["figures"]


def test_a_slower_canary_is_rolled_back_within_its_window(drill: Drill) -> None:
    outcome = _run(drill, "slow (+0.3 s TTFT)", {"first_token_s": 0.3})
    assert outcome["decision"]["verdict"] == "rollback", outcome["decision"]
    assert outcome["alias"]["version"] == 1
    assert outcome["took"] < WINDOW_S
    assert outcome["decision"]["figures"]["ttft_p95_ratio"] > ANALYSIS["max_ttft_p95_ratio"]


def test_a_good_canary_is_promoted_once_its_window_has_passed(drill: Drill) -> None:
    outcome = _run(drill, "good", {})
    assert outcome["decision"]["verdict"] == "promote", outcome["decision"]
    assert outcome["alias"]["version"] == 2 and outcome["alias"]["previous_version"] == 1
    assert outcome["took"] >= WINDOW_S
    assert outcome["audit"]["action"] == "alias.canary_promote"
    assert outcome["kept"] == 0, "a policy without sample_eval keeps no live prompt"


def test_a_canary_whose_answers_fail_the_sample_eval_is_rolled_back_with_both_pass_rates(
    drill: Drill, worker: Process
) -> None:
    evaluation = drill.call("POST", "/v1/evals", json=LIVE_EVAL)
    sample = {"eval_id": evaluation["id"], "sample_size": 4, "max_pass_rate_drop": 0.1,
              "max_completion_tokens": 2}  # fmt: skip
    outcome = _run(drill, "sample eval fails", {"say": "wrong"},
                   {**ANALYSIS, "sample_eval": sample})  # fmt: skip
    decision, audit = outcome["decision"], outcome["audit"]["details"]
    assert decision["verdict"] == "rollback", _sample_answers(
        drill, evaluation["id"], decision, worker
    )
    assert outcome["alias"]["version"] == 1 and outcome["alias"]["canary_version"] is None
    assert any("sample eval pass rate 0.0%" in r for r in audit["reasons"]), audit["reasons"]
    shown = audit["figures"]["sample_eval"]
    assert shown["stable"]["pass_rate"] == 1.0 and shown["canary"]["pass_rate"] == 0.0
    assert shown["kept"] == 4 and shown["pass_rate_drop"] == 1.0
    for side, version in (("stable", 1), ("canary", 2)):
        run = drill.call("GET", f"/v1/evals/{evaluation['id']}/runs/{shown[side]['run_id']}")
        assert run["status"] == "completed" and run["model"].endswith(f"@v{version}")
        assert run["metadata"]["canary_side"] == side
        items = run["data_source"]["source"]["content"]
        assert [i["item"]["input"] for i in items] == [CHAT["messages"]] * 4  # live prompts
    assert outcome["kept"] == 0, "the kept prompts go once the canary is decided"


def test_a_sample_eval_out_of_bounds_or_unfit_for_live_prompts_is_refused(drill: Drill) -> None:
    name = f"c-{secrets.token_hex(3)}"
    adapters = f"/api/v1/tenants/{drill.tenant_id}/adapters"
    drill.call("POST", adapters, json={"name": name, "base_model": TINY_BASE.name})
    for n in (1, 2):
        _upload(drill, f"{adapters}/{name}/versions", n)
    drill.call("PUT", f"{adapters}/{name}/aliases/prod", json={"version": 1})
    fit = drill.call("POST", "/v1/evals", json=LIVE_EVAL)["id"]
    needs_answer = drill.call("POST", "/v1/evals", json={**LIVE_EVAL, "testing_criteria": [
        {**LIVE_EVAL["testing_criteria"][0], "reference": "{{item.expected}}"}]})["id"]  # fmt: skip
    other = _other_tenants_eval(drill)
    refusals = {
        "sample_size": {"eval_id": fit, "sample_size": 10**6},
        "max_completion_tokens": {"eval_id": fit, "max_completion_tokens": 10**9},
        "max_pass_rate_drop": {"eval_id": fit, "max_pass_rate_drop": 2},
        "Object contains unknown field `prompts`": {"eval_id": fit, "prompts": ["x"] * 1000},
        "refers to {{item.expected}}, which a live prompt does not have": {"eval_id": needs_answer},
        f"no eval {other} of this tenant": {"eval_id": other},
        "no eval eval_nope of this tenant": {"eval_id": "eval_nope"},
    }  # fmt: skip
    canary = f"{drill.urls[0]}{adapters}/{name}/aliases/prod/canary"
    for said, sample in refusals.items():
        body = {"version": 2, "weight": 50, "analysis": {**ANALYSIS, "sample_eval": sample}}
        response = httpx.put(canary, json=body, headers=drill.auth, timeout=30)
        assert response.status_code == 400 and said in response.text, (said, response.text)
    alias = drill.call("GET", f"{adapters}/{name}/aliases/prod")
    assert alias["canary_version"] is None and alias["canary_analysis"] is None


def _other_tenants_eval(drill: Drill) -> str:
    slug = f"other-{secrets.token_hex(3)}"
    post = lambda path, body, headers: httpx.post(  # noqa: E731
        drill.urls[0] + path, json=body, headers=headers, timeout=30).json()  # fmt: skip
    tenant = post("/api/v1/tenants", {"slug": slug, "name": slug, "plan": "enterprise"}, drill.ops)
    key = post(f"/api/v1/tenants/{tenant['id']}/api-keys",
               {"name": "o", "scopes": ["inference"]}, drill.ops)["key"]  # fmt: skip
    return str(post("/v1/evals", LIVE_EVAL, {"Authorization": f"Bearer {key}"})["id"])


def _print() -> None:
    print("\ncanary drill (two API processes, stand-in engine, canary at 50 %, "
          f"window {WINDOW_S} s, minimum {MIN_REQUESTS} requests)")  # fmt: skip
    print(f"  {'case':<20} {'decision':<9} {'to decision':>11} {'sent':>5} "
          f"{'canary saw':>10} {'failed':>6}")  # fmt: skip
    for case, verdict, took, sent, seen, failed in TABLE:
        print(f"  {case:<20} {verdict:<9} {took:>10.1f}s {sent:>5} {seen:>10} {failed:>6}")


def _sample_answers(drill: Drill, eval_id: str, decision: dict[str, Any], worker: Process) -> str:
    """The decision with what each side's eval run answered and the end of the worker's log
    (the message of a failed test)."""
    said = [str(decision)]
    for side, run in decision["figures"].get("sample_eval", {}).items():
        if isinstance(run, dict) and run.get("run_id"):
            path = f"/v1/evals/{eval_id}/runs/{run['run_id']}"
            items = drill.call("GET", f"{path}/output_items")["data"]
            said.append(f"{side}: {drill.call('GET', path)['model']} answered "
                        f"{[(i['status'], i['sample']) for i in items]}")  # fmt: skip
    if worker.log is not None:
        said.append("worker log:\n" + "\n".join(worker.log.read_text().splitlines()[-40:]))
    return "\n".join(said)
