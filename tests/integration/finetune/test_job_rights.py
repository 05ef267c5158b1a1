"""A fine-tuning job changes only what the key that created it could change through the API:
a `fine-tune` key trains new adapters; adding a version to an existing adapter, or moving an
alias when the job succeeds, needs the `admin` scope, checked when the job is created."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import pytest
from litestar.testing import AsyncTestClient

from loraplex.auth.principal import Principal, Scope
from loraplex.finetune.permissions import JobRights
from loraplex.finetune.schemas import JobCreate
from loraplex.finetune.service import JobService
from tests.conftest import Api
from tests.support.adapter_api import create_adapter, ensure_tiny_base
from tests.support.no_queue import NoQueue

ROWS = b"".join(
    json.dumps({"messages": [{"role": "user", "content": f"q{i}"},
                             {"role": "assistant", "content": f"a{i}"}]}).encode() + b"\n"
    for i in range(12)
)  # fmt: skip


@pytest.fixture
async def setup(make_tenant: Any, operator: Api, client: AsyncTestClient) -> dict[str, Any]:
    """A tenant with an adapter in production, a `fine-tune`-only key and a training file."""
    tenant = await make_tenant()
    base = await ensure_tiny_base(operator)
    adapter = await create_adapter(tenant.api, tenant.id)
    made = await tenant.api.post(f"/api/v1/tenants/{tenant.id}/api-keys",
                                 json={"name": "trainer", "scopes": ["fine-tune"]})  # fmt: skip
    assert made.status_code == 201, made.text
    trainer = Api(client, made.json()["key"])
    uploaded = await trainer.post("/v1/files", data={"purpose": "fine-tune"},
                                  files={"file": ("t.jsonl", ROWS, "application/jsonl")})  # fmt: skip
    assert uploaded.status_code == 200, uploaded.text
    return {"tenant": tenant, "base": base, "adapter": adapter, "trainer": trainer,
            "file": uploaded.json()["id"]}  # fmt: skip


async def create_job(s: dict[str, Any], **fields: Any) -> Any:
    """POST /v1/fine_tuning/jobs with the fine-tune key."""
    body = {"model": s["base"], "training_file": s["file"], **fields}
    return await s["trainer"].post("/v1/fine_tuning/jobs", json=body)


async def no_jobs(s: dict[str, Any]) -> bool:
    """Whether the tenant has no job."""
    return (await s["trainer"].get("/v1/fine_tuning/jobs")).json()["data"] == []


async def test_a_fine_tune_key_cannot_add_a_version_to_an_existing_adapter(setup) -> None:
    response = await create_job(setup, suffix=setup["adapter"])
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["param"] == "suffix"
    assert f"adapter '{setup['adapter']}' exists" in error["message"]
    assert "'admin' scope" in error["message"]
    assert await no_jobs(setup)


async def test_a_fine_tune_key_cannot_name_an_alias_to_move(setup) -> None:
    response = await create_job(setup, suffix="brand-new", alias="prod")
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["param"] == "alias" and "alias 'prod'" in error["message"]
    assert await no_jobs(setup)


async def test_the_review_attack_is_refused(setup) -> None:
    """An existing adapter's name as suffix and `alias: prod`: what production serves."""
    response = await create_job(setup, suffix=setup["adapter"], alias="prod")
    assert response.status_code == 403
    assert await no_jobs(setup)


def key(*scopes: str) -> Principal:
    """A tenant key's principal with `scopes`."""
    return Principal(UUID(int=1), "k", UUID(int=2), frozenset(scopes))


async def test_a_fine_tune_key_may_train_a_new_adapter(setup, sessions) -> None:
    data = JobCreate(model=setup["base"], training_file=setup["file"], suffix="brand-new")
    async with sessions() as session:
        job = await JobService(session).create(
            UUID(setup["tenant"].id), data, "test", NoQueue(),  # type: ignore[arg-type]
            rights=JobRights.of_key(key(Scope.FINE_TUNE)),
        )  # fmt: skip
    assert job.suffix == "brand-new" and job.alias is None


async def test_an_admin_key_may_version_an_adapter_and_move_its_alias(setup, sessions) -> None:
    data = JobCreate(
        model=setup["base"], training_file=setup["file"], suffix=setup["adapter"], alias="prod"
    )
    async with sessions() as session:
        job = await JobService(session).create(
            UUID(setup["tenant"].id), data, "test", NoQueue(),  # type: ignore[arg-type]
            rights=JobRights.of_key(key(Scope.ADMIN, Scope.FINE_TUNE)),
        )  # fmt: skip
    assert job.alias == "prod"


async def test_a_caller_that_does_not_say_gets_the_least_rights(setup, sessions) -> None:
    from loraplex.errors import Forbidden

    data = JobCreate(model=setup["base"], training_file=setup["file"], alias="prod")
    async with sessions() as session:
        with pytest.raises(Forbidden, match="alias 'prod'"):
            await JobService(session).create(UUID(setup["tenant"].id), data, "test", NoQueue())  # type: ignore[arg-type]
