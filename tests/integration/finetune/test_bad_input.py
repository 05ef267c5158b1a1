"""Bad training data and bad job requests are refused with clear 4xx answers naming the problem."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from loraplex.adapters.facts import facts_to_json, read_base_model_facts
from tests.integration.conftest import BASE, Served
from tests.integration.finetune.conftest import Process, chat_rows, write_jsonl

pytestmark = pytest.mark.engine
GOOD = chat_rows([("What is two plus two?", "Four."), ("Name a colour.", "Blue.")])


def _client(served: Served) -> OpenAI:
    return OpenAI(base_url=f"{served.url}/v1", api_key=served.key, max_retries=0, timeout=60)


def _upload_raw(served: Served, content: bytes, purpose: str = "fine-tune") -> httpx.Response:
    return httpx.post(
        f"{served.url}/v1/files",
        headers=served.headers(),
        timeout=60,
        files={"file": ("data.jsonl", content)},
        data={"purpose": purpose},
    )


@pytest.mark.parametrize(
    "content, needle",
    [
        (
            b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n{not json\n',
            "line 2",
        ),
        (
            json.dumps(
                {"messages": [{"content": "no role"}, {"role": "assistant", "content": "x"}]}
            ).encode()
            + b"\n",
            "line 1",
        ),
        (
            json.dumps({"messages": [{"role": "user", "content": "no answer"}]}).encode() + b"\n",
            "assistant",
        ),
        (b"", "empty"),
        (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}\n', "UTF-8"),
        (
            json.dumps(
                {
                    "messages": [
                        {"role": "wizard", "content": "x"},
                        {"role": "assistant", "content": "y"},
                    ]
                }
            ).encode()
            + b"\n",
            "role",
        ),
    ],
)
def test_invalid_training_files_are_refused_with_line_numbers(
    served: Served, content: bytes, needle: str
) -> None:
    response = _upload_raw(served, content)
    assert response.status_code == 400, response.text
    assert needle.lower() in response.json()["error"]["message"].lower()


def test_a_file_over_the_byte_limit_is_refused(served: Served) -> None:
    row = json.dumps(GOOD[0]).encode() + b"\n"
    response = _upload_raw(served, row * (300 * 1024 // len(row)))
    assert response.status_code == 413


def test_the_purpose_must_be_fine_tune(served: Served) -> None:
    response = _upload_raw(served, json.dumps(GOOD[0]).encode() + b"\n", purpose="assistants")
    assert response.status_code == 400 and "purpose" in response.json()["error"]["message"]


def test_unknown_base_model_is_refused(served: Served, tmp_path: Path) -> None:
    client = _client(served)
    uploaded = client.files.create(
        file=write_jsonl(tmp_path / "d.jsonl", GOOD).open("rb"), purpose="fine-tune"
    )
    with pytest.raises(openai.BadRequestError, match="not available"):
        client.fine_tuning.jobs.create(model="gpt-9", training_file=uploaded.id)


def test_another_tenants_file_cannot_be_used(served: Served, tmp_path: Path) -> None:
    uploaded = _client(served).files.create(
        file=write_jsonl(tmp_path / "d.jsonl", GOOD).open("rb"), purpose="fine-tune"
    )
    slug = f"ft-other-{secrets.token_hex(3)}"
    tenant = httpx.post(
        f"{served.url}/api/v1/tenants", json={"slug": slug, "name": slug}, headers=served.operator()
    ).json()
    key = httpx.post(
        f"{served.url}/api/v1/tenants/{tenant['id']}/api-keys",
        json={"name": "x", "scopes": ["fine-tune"]},
        headers=served.operator(),
    ).json()["key"]
    other = OpenAI(base_url=f"{served.url}/v1", api_key=key, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="training_file"):
        other.fine_tuning.jobs.create(model=BASE, training_file=uploaded.id)
    with pytest.raises(openai.NotFoundError):
        other.files.retrieve(uploaded.id)


def test_a_suffix_naming_an_adapter_of_another_base_model_is_a_conflict(
    served: Served, tmp_path: Path
) -> None:
    other_base = f"other-base-{secrets.token_hex(2)}"
    facts = {
        **facts_to_json(read_base_model_facts(served.engine.model_dir)),
        "name": other_base,
        "source": str(served.engine.model_dir),
    }
    httpx.post(f"{served.url}/api/v1/base-models", json=facts, headers=served.operator())
    name = f"clash-{secrets.token_hex(2)}"
    httpx.post(
        f"{served.url}/api/v1/tenants/{served.tenant_id}/adapters",
        headers=served.headers(),
        json={"name": name, "base_model": other_base},
    )
    client = _client(served)
    uploaded = client.files.create(
        file=write_jsonl(tmp_path / "d.jsonl", GOOD).open("rb"), purpose="fine-tune"
    )
    with pytest.raises(openai.ConflictError, match=name):
        client.fine_tuning.jobs.create(model=BASE, training_file=uploaded.id, suffix=name)


def test_rows_over_the_context_fail_validation_with_their_line(
    served: Served, worker: Process, tmp_path: Path
) -> None:
    long_row = chat_rows([(" ".join(f"w{i}" for i in range(6000)), "ok")])
    client = _client(served)
    uploaded = client.files.create(
        file=write_jsonl(tmp_path / "long.jsonl", GOOD + long_row).open("rb"), purpose="fine-tune"
    )
    job = client.fine_tuning.jobs.create(model=BASE, training_file=uploaded.id, suffix="too-long")
    deadline = time.monotonic() + 120
    while (job := client.fine_tuning.jobs.retrieve(job.id)).status == "validating_files":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert job.status == "failed" and job.error and "line 3" in job.error.message
