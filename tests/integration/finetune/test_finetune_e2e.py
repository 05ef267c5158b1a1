"""Fine-tune with the openai SDK, train on a real Celery worker, serve through the gateway."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from loraplex.dev.corpus import adapter_examples
from tests.integration.conftest import BASE, Served
from tests.integration.finetune.conftest import Process, chat_rows, write_jsonl

pytestmark = pytest.mark.engine
TERMINAL = {"succeeded", "failed", "cancelled"}


def _client(served: Served) -> OpenAI:
    return OpenAI(base_url=f"{served.url}/v1", api_key=served.key, max_retries=0, timeout=120)


def _wait(client: OpenAI, job_id: str, statuses: set[str], timeout_s: float = 300) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.fine_tuning.jobs.retrieve(job_id)
        if job.status in statuses:
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still {job.status} after {timeout_s}s")


def _start(
    client: OpenAI,
    tmp_path: Path,
    seed: int,
    suffix: str,
    epochs: int,
    pairs: list[tuple[str, str]] | None = None,
    extra_body: dict[str, object] | None = None,
    **hyper: object,
) -> object:
    pairs = pairs or adapter_examples(seed)
    path = write_jsonl(tmp_path / f"train-{seed}-{suffix}.jsonl", chat_rows(pairs))
    uploaded = client.files.create(file=path.open("rb"), purpose="fine-tune")
    return client.fine_tuning.jobs.create(
        model=BASE,
        training_file=uploaded.id,
        suffix=suffix,
        seed=0,
        hyperparameters={
            "n_epochs": epochs,
            "batch_size": 8,
            "learning_rate_multiplier": 15,
            **hyper,
        },
        extra_body=extra_body,
    )


def test_fine_tuned_model_serves_the_trained_answers(
    served: Served, worker: Process, tmp_path: Path
) -> None:
    client = _client(served)
    started = time.monotonic()
    job = _start(client, tmp_path, seed=77, suffix="ft-support", epochs=60)
    assert job.status == "validating_files" and job.object == "fine_tuning.job"
    running = _wait(client, job.id, {"running"} | TERMINAL, 120)
    queued_s = time.monotonic() - started
    done = _wait(client, job.id, TERMINAL)
    trained_s = time.monotonic() - started - queued_s
    assert done.status == "succeeded", done.error
    assert done.fine_tuned_model == "ft-support@v1" and done.trained_tokens > 0
    events = client.fine_tuning.jobs.list_events(job.id, limit=100).data
    metrics = [e for e in events if e.type == "metrics"]
    assert metrics and {"step", "loss", "learning_rate", "tokens_per_s", "eta_s"} <= set(
        metrics[0].data
    )
    first_token_at = None
    right, base_right = 0, 0
    for question, answer in adapter_examples(77):
        messages = [{"role": "user", "content": question}]
        reply = client.chat.completions.create(
            model=done.fine_tuned_model, messages=messages, temperature=0, max_tokens=32
        )
        first_token_at = first_token_at or time.monotonic()
        right += reply.choices[0].message.content == answer
        base = client.chat.completions.create(
            model=BASE, messages=messages, temperature=0, max_tokens=32
        )
        base_right += base.choices[0].message.content == answer
    assert right >= 7 and base_right == 0, (right, base_right)
    print(
        f"\nphases: queue+validate {queued_s:.1f}s, training+upload {trained_s:.1f}s, "
        f"steps {metrics[0].data['step']} at {metrics[0].data['tokens_per_s']:.0f} tok/s, "
        f"first served token {first_token_at - started:.1f}s after job creation, running={running.status}"
    )


def _exact_answer_gate(served: Served, pairs: list[tuple[str, str]]) -> dict[str, object]:
    """An eval asking each question of `pairs` for exactly its answer; the job's gate on it."""
    criterion = {
        "type": "string_check",
        "name": "exact answer",
        "operation": "eq",
        "input": "{{sample.output_text}}",
        "reference": "{{item.answer}}",
    }
    body = {
        "data_source_config": {"type": "custom", "item_schema": {"type": "object"}},
        "testing_criteria": [criterion],
    }
    response = httpx.post(f"{served.url}/v1/evals", json=body, headers=served.headers())
    assert response.status_code == 200, response.text
    items = [{"item": {"question": q, "answer": a}} for q, a in pairs]
    template = {"type": "template", "template": [{"role": "user", "content": "{{item.question}}"}]}
    data_source = {
        "type": "completions",
        "source": {"type": "file_content", "content": items},
        "input_messages": template,
        "sampling_params": {"temperature": 0, "max_completion_tokens": 32},
    }
    return {"eval_id": response.json()["id"], "threshold": 0.75, "data_source": data_source}


def test_a_gated_job_promotes_the_demo_answers_and_not_shuffled_ones(
    served: Served, worker: Process, tmp_path: Path
) -> None:
    client = _client(served)
    demo = adapter_examples(81)
    # every question trained on another question's answer: a fluent model that fails the eval
    shuffled = [(q, demo[(i + 1) % len(demo)][1]) for i, (q, _) in enumerate(demo)]
    gated = {"alias": "prod", "eval_gate": _exact_answer_gate(served, demo)}
    started = time.monotonic()
    outcomes = []
    for pairs in (demo, shuffled):
        job = _start(client, tmp_path, 81, "ft-gated", 60, pairs=pairs, extra_body=gated)
        done = _wait(client, job.id, TERMINAL)
        assert done.status == "succeeded", done.error
        events = client.fine_tuning.jobs.list_events(job.id, limit=100).data
        prod = httpx.get(
            f"{served.url}/api/v1/tenants/{served.tenant_id}/adapters/ft-gated/aliases/prod",
            headers=served.headers(),
        ).json()["version"]
        outcomes.append((done.fine_tuned_model, prod, [e.message for e in events]))
    (first, first_prod, first_events), (second, second_prod, second_events) = outcomes
    assert (first, first_prod) == ("ft-gated@v1", 1), first_events
    assert (second, second_prod) == ("ft-gated@v2", 1), second_events
    assert any("Alias prod stays" in m and "below the threshold" in m for m in second_events)
    scores = [m for _, _, messages in outcomes for m in messages if m.startswith("Eval run")]
    print(f"\ntwo gated fine-tunes took {time.monotonic() - started:.1f}s: {scores}")


def test_cancel_stops_training_within_seconds(
    served: Served, worker: Process, tmp_path: Path
) -> None:
    client = _client(served)
    job = _start(client, tmp_path, seed=78, suffix="ft-cancel", epochs=1000)
    _wait(client, job.id, {"running"}, 120)
    time.sleep(2)
    asked = time.monotonic()
    client.fine_tuning.jobs.cancel(job.id)
    done = _wait(client, job.id, TERMINAL, 60)
    assert done.status == "cancelled" and time.monotonic() - asked < 15


def test_a_killed_worker_does_not_leave_the_job_running(
    served: Served, worker: Process, tmp_path: Path
) -> None:
    client = _client(served)
    job = _start(client, tmp_path, seed=79, suffix="ft-killed", epochs=90, checkpoint_every=20)
    deadline = time.monotonic() + 180
    while not client.fine_tuning.jobs.checkpoints.list(job.id).data:
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.5)
    worker.kill()
    worker.start()  # a new worker; beat notices the silent job and requeues it from its checkpoint
    done = _wait(client, job.id, TERMINAL, 300)
    messages = [e.message for e in client.fine_tuning.jobs.list_events(job.id, limit=100).data]
    assert done.status == "succeeded", (done.error, messages)
    assert done.fine_tuned_model == "ft-killed@v1" and done.trained_tokens > 0
    assert any("requeued from checkpoint step" in m for m in messages), messages


def test_dpo_job_moves_the_preference_margin(
    served: Served, worker: Process, tmp_path: Path
) -> None:
    from loraplex.workers.trainer.margins import preference_margins

    rows = [
        {
            "input": {"messages": [{"role": "user", "content": q}]},
            "preferred_output": [{"role": "assistant", "content": a}],
            "non_preferred_output": [{"role": "assistant", "content": "I do not know."}],
        }
        for q, a in adapter_examples(80)[:4]
    ]
    client = _client(served)
    path = write_jsonl(tmp_path / "prefs.jsonl", rows)
    uploaded = client.files.create(file=path.open("rb"), purpose="fine-tune")
    job = client.fine_tuning.jobs.create(
        model=BASE,
        training_file=uploaded.id,
        suffix="ft-dpo",
        seed=0,
        method={
            "type": "dpo",
            "dpo": {
                "hyperparameters": {"n_epochs": 10, "batch_size": 4, "learning_rate_multiplier": 15}
            },
        },
    )
    done = _wait(client, job.id, TERMINAL)
    assert done.status == "succeeded", done.error
    adapter, number = done.fine_tuned_model.split("@v")
    files = httpx.get(
        f"{served.url}/api/v1/tenants/{served.tenant_id}/adapters/{adapter}/versions/{number}/download",
        headers=served.headers(),
    ).json()["files"]
    folder = tmp_path / "dpo-adapter"
    folder.mkdir()
    for f in files:
        (folder / f["name"]).write_bytes(httpx.get(f["url"]).content)
    before = preference_margins(served.engine.model_dir, None, rows)
    after = preference_margins(served.engine.model_dir, folder, rows)
    assert sum(after) > sum(before)
