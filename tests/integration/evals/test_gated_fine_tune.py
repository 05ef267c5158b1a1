"""A gated fine-tune at the end of training (the trainer's result stubbed with a tiny
adapter): the worker's gate evaluates the new version through the live API and moves the
alias only if it passes and beats the baseline by the margin; the job's events say why."""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from uuid import UUID

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.connections import open_object_store
from loraplex.db.models import BaseModel, FineTuneEvent, FineTuneJob, JobStatus
from loraplex.workers.training_run import TrainingRun
from tests.integration.evals.conftest import Stack
from tests.support.lora_files import TINY_BASE, write_adapter

pytestmark = pytest.mark.filterwarnings("ignore:The Evals API is deprecated:DeprecationWarning")
ITEMS = [{"item": {"question": "tokens=2", "expected": "evals"}} for _ in range(3)]


def _adapter_at_v1(stack: Stack, folder: Path) -> tuple[str, str]:
    """A new adapter with v1 uploaded and alias `prod` on it; (name, adapters URL)."""
    name = f"gated-{secrets.token_hex(3)}"
    base = f"{stack.url}/api/v1/tenants/{stack.tenant_id}/adapters"
    with httpx.Client(headers=stack.headers(), timeout=60) as http:
        response = http.post(base, json={"name": name, "base_model": TINY_BASE.name})
        assert response.status_code == 201, response.text
        write_adapter(folder)
        files = [
            ("file", (p, (folder / p).open("rb")))
            for p in ("adapter_config.json", "adapter_model.safetensors")
        ]
        response = http.post(f"{base}/{name}/versions", files=files)
        assert response.status_code == 201, response.text
        response = http.put(f"{base}/{name}/aliases/prod", json={"version": 1})
        assert response.status_code == 200, response.text
    return name, f"{base}/{name}"


def _eval_id(stack: Stack) -> str:
    body = {
        "data_source_config": {"type": "custom", "item_schema": {"type": "object"}},
        "testing_criteria": [
            {
                "type": "string_check",
                "name": "says",
                "operation": "like",
                "input": "{{sample.output_text}}",
                "reference": "{{item.expected}}",
            }
        ],
    }
    response = httpx.post(f"{stack.url}/v1/evals", json=body, headers=stack.headers())
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


async def _finish_training(
    stack: Stack,
    sessions: async_sessionmaker[AsyncSession],
    name: str,
    gate: dict[str, Any],
    folder: Path,
) -> list[str]:
    """A running job for `name` with `gate`, ended by a stubbed trainer result; its events."""
    async with sessions() as session:
        base = await session.scalar(select(BaseModel).where(BaseModel.name == TINY_BASE.name))
        assert base is not None
        job = FineTuneJob(
            tenant_id=UUID(stack.tenant_id),
            base_model_id=base.id,
            model=base.name,
            training_file_id=None,
            suffix=name,
            status=JobStatus.RUNNING,
            alias="prod",
            eval_gate=gate,
        )
        session.add(job)
        await session.commit()
    settings = replace(stack.settings)
    run = TrainingRun(job.id, settings, sessions, open_object_store(settings))
    result = SimpleNamespace(
        adapter_dir=write_adapter(folder, rank=8),
        trained_tokens=10,
        quantized=True,
        fallback_reason="",
    )
    await run._succeed(job, result)
    async with sessions() as session:
        assert (await session.get_one(FineTuneJob, job.id)).status == JobStatus.SUCCEEDED
        events = await session.scalars(
            select(FineTuneEvent.message).where(FineTuneEvent.job_id == job.id)
        )
        return list(events)


def _gate(stack: Stack, **more: Any) -> dict[str, Any]:
    template = {"type": "template", "template": [{"role": "user", "content": "{{item.question}}"}]}
    source = {"type": "file_content", "content": ITEMS}
    data_source = {"type": "completions", "source": source, "input_messages": template}
    return {"eval_id": _eval_id(stack), "data_source": data_source, **more}


def _prod(url: str, stack: Stack) -> int:
    response = httpx.get(f"{url}/aliases/prod", headers=stack.headers())
    return int(response.json()["version"])


async def test_a_version_that_passes_its_eval_is_promoted(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tmp_path: Path
) -> None:
    name, url = _adapter_at_v1(stack, tmp_path / "v1")
    events = await _finish_training(
        stack, sessions, name, _gate(stack, threshold=1.0), tmp_path / "v2"
    )
    assert _prod(url, stack) == 2
    assert any("Alias prod moved to v2: pass rate 1.000" in e for e in events), events
    assert any("moves only if it passes its eval" in e for e in events), events


async def test_a_version_that_does_not_beat_its_baseline_leaves_the_alias(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tmp_path: Path
) -> None:
    name, url = _adapter_at_v1(stack, tmp_path / "v1")
    gate = _gate(stack, threshold=0.5, baseline=f"{name}@prod", margin=0.1)
    events = await _finish_training(stack, sessions, name, gate, tmp_path / "v2")
    assert _prod(url, stack) == 1
    assert any("Alias prod stays" in e and "baseline's 1.000" in e for e in events), events


async def test_a_gate_on_an_eval_that_fails_every_item_leaves_the_alias(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tmp_path: Path
) -> None:
    name, url = _adapter_at_v1(stack, tmp_path / "v1")
    gate = _gate(stack, threshold=0.5)
    gate["data_source"]["source"]["content"] = [
        {"item": {"question": "tokens=2", "expected": "paris"}}
    ]
    events = await _finish_training(stack, sessions, name, gate, tmp_path / "v2")
    assert _prod(url, stack) == 1
    assert any("below the threshold 0.500" in e for e in events), events
