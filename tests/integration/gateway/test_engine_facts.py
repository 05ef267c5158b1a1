"""Registering a real engine with facts it contradicts is refused, naming the field.

Schema fuzzing once registered the suite's SGLang engine as `kind: vllm` with rank 381 and
thousands of slots; the API accepted it, put it in rotation, and every tenant request then
failed with the engine's "Not Found". Now the engine is asked what it was started with.
"""

from __future__ import annotations

import secrets
from typing import Any

import httpx
import pytest

from loraplex.adapters.facts import facts_to_json, read_base_model_facts
from tests.integration.conftest import Served

pytestmark = pytest.mark.engine


def register(served: Served, **claim: Any) -> httpx.Response:
    """POST the SGLang engine of `served` with its true facts changed by `claim`."""
    engine = served.engine
    body = {
        "name": f"facts-{secrets.token_hex(3)}", "url": engine.url, "kind": engine.kind,
        "base_model": served.base, "max_lora_rank": engine.max_lora_rank,
        "gpu_slots": engine.gpu_slots, "host_slots": engine.host_slots, **claim,
    }  # fmt: skip
    headers = {"Authorization": f"Bearer {served.operator_key}"}
    return httpx.post(f"{served.url}/api/v1/engines", json=body, headers=headers, timeout=60)


def test_sglang_registered_as_vllm_is_refused(served: Served) -> None:
    response = register(served, kind="vllm", max_lora_rank=64)
    assert response.status_code == 400, response.text
    assert response.json()["param"] == "kind"
    assert "SGLang" in response.json()["detail"]


def test_slots_the_engine_was_not_started_with_are_refused(served: Served) -> None:
    response = register(served, gpu_slots=served.engine.gpu_slots + 1)
    assert response.status_code == 400, response.text
    assert response.json()["param"] == "gpu_slots"
    assert "--max-loras-per-batch" in response.json()["detail"]


def test_a_base_model_the_engine_does_not_serve_is_refused(served: Served) -> None:
    ops = {"Authorization": f"Bearer {served.operator_key}"}
    other = f"facts-other-{secrets.token_hex(3)}"  # the same shapes, another model's folder
    facts = {
        **facts_to_json(read_base_model_facts(served.engine.model_dir)),
        "name": other, "source": f"/models/{other}",
    }  # fmt: skip
    made = httpx.post(f"{served.url}/api/v1/base-models", json=facts, headers=ops, timeout=60)
    assert made.status_code == 201, made.text
    response = register(served, base_model=other)
    assert response.status_code == 400, response.text
    assert response.json()["param"] == "base_model"
    assert f"serves {served.engine.served_model!r}" in response.json()["detail"]


def test_the_engine_registered_truthfully_is_accepted(served: Served) -> None:
    response = register(served)
    assert response.status_code == 201, response.text
    ops = {"Authorization": f"Bearer {served.operator_key}"}
    httpx.delete(f"{served.url}/api/v1/engines/{response.json()['id']}", headers=ops, timeout=60)
