"""The openai SDK's client.evals against the live stack: an eval, a run on a Celery worker
that generates through the API as the tenant, its counts and per-item grades (the stand-in
engine answers `evals evals ` to a "tokens=2" prompt, so the scores are computed by hand)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.integration.evals.conftest import Stack, new_tenant
from tests.support.lora_files import TINY_BASE
from tests.support.operators import operator_key

# The SDK warns that OpenAI is retiring its hosted evals; the shape is what Loraplex serves.
pytestmark = pytest.mark.filterwarnings("ignore:The Evals API is deprecated:DeprecationWarning")
ANSWER = "evals evals "  # what the stand-in says to "tokens=2"
SCHEMA = {
    "type": "object",
    "properties": {"question": {"type": "string"}, "expected": {"type": "string"}},
    "required": ["question", "expected"],
}
CRITERIA: list[Any] = [
    {
        "type": "string_check",
        "name": "mentions",
        "operation": "ilike",
        "input": "{{sample.output_text}}",
        "reference": "{{item.expected}}",
    },
    {
        "type": "text_similarity",
        "name": "close",
        "evaluation_metric": "fuzzy_match",
        "input": "{{sample.output_text}}",
        "reference": "{{item.expected}}",
        "pass_threshold": 0.9,
    },
]
TEMPLATE = {"type": "template", "template": [{"role": "user", "content": "{{item.question}}"}]}


def _client(stack: Stack) -> OpenAI:
    return OpenAI(base_url=f"{stack.url}/v1", api_key=stack.key, max_retries=0, timeout=60)


def _wait(client: OpenAI, eval_id: str, run_id: str, timeout_s: float = 120) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = client.evals.runs.retrieve(run_id, eval_id=eval_id)
        if run.status in ("completed", "failed", "canceled"):
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} still {run.status} after {timeout_s}s")


def _eval(client: OpenAI) -> Any:
    return client.evals.create(
        name="capitals",
        data_source_config={"type": "custom", "item_schema": SCHEMA, "include_sample_schema": True},
        testing_criteria=CRITERIA,
    )


def _start_run(
    client: OpenAI,
    evaluation: Any,
    items: list[Any] | str,
    model: str = TINY_BASE.name,
    **more: Any,
) -> Any:
    """A completions run of `evaluation` on `model` over `items` (inline, or an uploaded
    file's id); `more` goes into its data source (sampling_params)."""
    source = (
        {"type": "file_id", "id": items}
        if isinstance(items, str)
        else {"type": "file_content", "content": items}
    )
    data_source = {"type": "completions", "model": model, "input_messages": TEMPLATE,
                   "source": source, **more}  # fmt: skip
    return client.evals.runs.create(evaluation.id, data_source=data_source)


def test_a_run_grades_every_item_as_computed_by_hand(stack: Stack) -> None:
    client = _client(stack)
    evaluation = _eval(client)
    items = [
        {"item": {"question": "tokens=2", "expected": "evals evals"}},  # both pass
        {"item": {"question": "tokens=2", "expected": "EVALS EVALS"}},  # ilike only
        {"item": {"question": "tokens=2", "expected": "evals"}},  # ilike only
        {"item": {"question": "tokens=2", "expected": "paris"}},  # neither
    ]
    run = _start_run(
        client, evaluation, items, sampling_params={"temperature": 0, "max_completion_tokens": 8}
    )
    assert run.status == "queued" and run.object == "eval.run"
    done = _wait(client, evaluation.id, run.id)
    assert done.status == "completed", done.error
    assert done.result_counts.model_dump() == {"total": 4, "passed": 1, "failed": 3, "errored": 0}
    per = {r.testing_criteria: (r.passed, r.failed) for r in done.per_testing_criteria_results}
    assert per == {"mentions": (3, 1), "close": (1, 3)}
    output = list(client.evals.runs.output_items.list(run.id, eval_id=evaluation.id))
    assert [o.datasource_item_id for o in output] == [0, 1, 2, 3]
    first = {r.name: r.score for r in output[0].results}
    # fuzzy_match("evals evals ", "evals evals") = 2 * 11 / (12 + 11); "evals": 2 * 5 / 17.
    assert first == {"mentions": 1.0, "close": pytest.approx(22 / 23)}
    assert {r.name: r.score for r in output[2].results}["close"] == pytest.approx(10 / 17)
    assert output[0].sample.output[0].content == ANSWER


def test_a_100_item_file_run_completes_and_reports_its_latency(
    stack: Stack, tmp_path: Path
) -> None:
    client = _client(stack)
    evaluation = _eval(client)
    path = tmp_path / "items.jsonl"
    path.write_text(
        "".join(
            json.dumps({"item": {"question": "tokens=2", "expected": "evals evals"}}) + "\n"
            for _ in range(100)
        )
    )
    uploaded = client.files.create(file=path.open("rb"), purpose="evals")
    started = time.monotonic()
    run = _start_run(client, evaluation, uploaded.id)
    done = _wait(client, evaluation.id, run.id)
    latency = time.monotonic() - started
    print(f"\n100-item eval run (stand-in engine, 4 in flight): {latency:.2f} s")
    assert done.status == "completed", done.error
    assert done.result_counts.passed == 100
    assert done.per_model_usage[0].invocation_count == 100


def test_items_not_matching_the_schema_are_refused_before_the_run(stack: Stack) -> None:
    client = _client(stack)
    evaluation = _eval(client)
    with pytest.raises(openai.BadRequestError, match=r"content\[0\] does not match"):
        _start_run(client, evaluation, [{"item": {"q": 1}}])
    assert list(client.evals.runs.list(evaluation.id)) == []


def test_a_run_on_a_model_the_tenant_cannot_use_fails_naming_it(stack: Stack) -> None:
    client = _client(stack)
    evaluation = _eval(client)
    run = _start_run(
        client,
        evaluation,
        [{"item": {"question": "q", "expected": "e"}}],
        model="no-such-adapter@v1",
    )
    done = _wait(client, evaluation.id, run.id)
    assert done.status == "failed" and "no-such-adapter" in done.error.message


def test_a_canceled_run_stops_and_a_deleted_one_is_gone(stack: Stack) -> None:
    client = _client(stack)
    evaluation = _eval(client)
    slow = {"item": {"question": "tokens=20 every=0.2", "expected": "evals"}}  # 4 s each
    run = _start_run(client, evaluation, [slow] * 16)
    canceled = client.evals.runs.cancel(run.id, eval_id=evaluation.id)
    assert canceled.status == "canceled"
    time.sleep(3)  # past the worker's claim and its cancel poll
    assert client.evals.runs.retrieve(run.id, eval_id=evaluation.id).status == "canceled"
    assert list(client.evals.runs.output_items.list(run.id, eval_id=evaluation.id)) == []
    deleted = client.evals.runs.delete(run.id, eval_id=evaluation.id)
    assert deleted.deleted and deleted.run_id == run.id
    assert list(client.evals.runs.list(evaluation.id)) == []


def _spend(stack: Stack, requests: int, timeout_s: float = 30) -> dict[str, Any]:
    """The tenant's spend report once the gateway's flushes (every 5 s) have written
    `requests` requests."""
    deadline = time.monotonic() + timeout_s
    while True:
        url = f"{stack.url}/api/v1/tenants/{stack.tenant_id}/spend"
        report = httpx.get(url, headers=stack.headers(), timeout=30).json()
        written = sum(row["requests"] for row in report["rows"])
        if written >= requests or time.monotonic() > deadline:
            return dict(report)
        time.sleep(0.5)


def test_a_runs_tokens_are_eval_spend_and_count_against_the_daily_quota(stack: Stack) -> None:
    # A tenant of its own: its quota is changed below.
    ops = {"Authorization": f"Bearer {operator_key(stack.settings, 'eval-usage')}"}
    own = new_tenant(stack, ops, "eval-usage")
    client = _client(own)
    evaluation = _eval(client)
    items = [{"item": {"question": "tokens=2", "expected": "evals"}}] * 3
    run = _start_run(client, evaluation, items)
    done = _wait(client, evaluation.id, run.id)
    assert done.status == "completed", done.error
    tokens = done.per_model_usage[0].total_tokens
    assert tokens > 0

    report = _spend(own, requests=3)
    assert {row["kind"] for row in report["rows"]} == {"eval"}  # none of it as inference
    [kind] = report["by_kind"]
    assert (kind["name"], kind["requests"], kind["tokens"]) == ("eval", 3, tokens)

    # The same tokens are in the tenant's daily counter: a quota of 1 token refuses the
    # tenant's own next request, naming what was used (it made no request but the run's).
    quota = f"{own.url}/api/v1/tenants/{own.tenant_id}/quota"
    changed = httpx.put(quota, json={"overrides": {"daily_tokens": 1}}, headers=ops, timeout=30)
    assert changed.status_code == 200, changed.text
    refused = httpx.post(
        f"{own.url}/v1/chat/completions",
        json={
            "model": TINY_BASE.name,
            "messages": [{"role": "user", "content": "tokens=2"}],
            "max_tokens": 2,
        },
        headers=own.headers(),
        timeout=30,
    )
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "insufficient_quota"
    used = re.search(r"\((\d+) used", refused.json()["error"]["message"])
    assert used is not None and int(used.group(1)) >= tokens
