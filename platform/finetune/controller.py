"""OpenAI's files and fine-tuning routes: /v1/files and /v1/fine_tuning/jobs."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, delete, get, post
from litestar.params import Parameter
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.adapters.store import ObjectStore
from loraplex.auth import access
from loraplex.auth.principal import Principal, Scope
from loraplex.cpu_pool import CpuPool
from loraplex.errors import Forbidden
from loraplex.finetune.files import FileService
from loraplex.finetune.ids import FILE, public
from loraplex.finetune.openapi import (
    CREATE_FILE,
    CREATE_JOB,
    DELETE_FILE,
    FILES,
    JOBS,
    ONE_FILE,
    ONE_JOB,
)
from loraplex.finetune.permissions import JobRights
from loraplex.finetune.queue import JobQueue
from loraplex.finetune.schemas import (
    JobCreate,
    checkpoint_object,
    event_object,
    file_object,
    job_object,
)
from loraplex.finetune.service import JobService
from loraplex.finetune.spend import settle_job
from loraplex.finetune.uploads import upload_jsonl_file
from loraplex.gateway.admission.budgets import BudgetGuard
from loraplex.gateway.body_limits import decode_json
from loraplex.settings import Settings

Limit = Annotated[int, Parameter(ge=1, le=100)]
FT = access.tenant(Scope.FINE_TUNE)
JOB = "/v1/fine_tuning/jobs/{job_id:str}"


def _tenant(principal: Principal) -> Any:
    if principal.tenant_id is None:
        raise Forbidden(
            "fine-tuning runs as a tenant: use a tenant API key with the 'fine-tune' scope"
        )
    return principal.tenant_id


class FineTuningController(Controller):
    """Files and fine-tuning jobs, shaped like OpenAI's so its SDK drives them."""

    tags = ["fine-tuning"]

    @post(
        "/v1/files",
        operation_id="CreateFile",
        operation_class=CREATE_FILE,
        opt=FT,
        status_code=200,
        request_max_body_size=None,
    )
    async def create_file(
        self,
        request: Request[Any, Any, Any],
        principal: Principal,
        db_session: AsyncSession,
        store: ObjectStore,
        settings: Settings,
        cpu_pool: CpuPool,
    ) -> dict[str, Any]:
        """Upload a JSONL training file (purpose `fine-tune`), validated before it is kept."""
        files = FileService(db_session, store, cpu_pool)
        row = await upload_jsonl_file(request, files, settings, _tenant(principal), principal.actor)
        return file_object(row)

    @get("/v1/files", operation_id="ListFiles", operation_class=FILES, opt=FT)
    async def list_files(
        self, principal: Principal, db_session: AsyncSession, store: ObjectStore
    ) -> dict[str, Any]:
        """The tenant's files."""
        rows = await FileService(db_session, store).list(_tenant(principal))
        return {"object": "list", "data": [file_object(r) for r in rows], "has_more": False}

    @get("/v1/files/{file_id:str}", operation_id="RetrieveFile", operation_class=ONE_FILE, opt=FT)
    async def get_file(
        self, file_id: str, principal: Principal, db_session: AsyncSession, store: ObjectStore
    ) -> dict[str, Any]:
        """One file."""
        return file_object(await FileService(db_session, store).get(_tenant(principal), file_id))

    @delete(
        "/v1/files/{file_id:str}",
        operation_id="DeleteFile",
        operation_class=DELETE_FILE,
        opt=FT,
        status_code=200,
    )
    async def delete_file(
        self, file_id: str, principal: Principal, db_session: AsyncSession, store: ObjectStore
    ) -> dict[str, Any]:
        """Delete a file."""
        row = await FileService(db_session, store).delete(
            _tenant(principal), file_id, principal.actor
        )
        return {"id": public(FILE, row.id), "object": "file", "deleted": True}

    @post(
        "/v1/fine_tuning/jobs",
        operation_id="CreateFineTuningJob",
        operation_class=CREATE_JOB,
        opt=FT,
        status_code=200,
    )
    async def create_job(
        self,
        request: Request[Any, Any, Any],
        principal: Principal,
        db_session: AsyncSession,
        job_queue: JobQueue,
        budgets: BudgetGuard,
    ) -> dict[str, Any]:
        """Create a job; it is validated and trained by the workers."""
        # As /v1 bodies are: containers counted before decoding, which runs with the GC paused
        # (1 MiB of `{},` as `integrations` decoded to 340k dicts before any check).
        data = decode_json(await request.body(), JobCreate, lambda _: None)
        jobs = JobService(db_session)
        job = await jobs.create(
            _tenant(principal), data, principal.actor, job_queue,
            rights=JobRights.of_key(principal), budgets=budgets, key_id=principal.key_id,
        )  # fmt: skip
        return job_object(job, *await jobs.file_ids(job))

    @get("/v1/fine_tuning/jobs", operation_id="ListFineTuningJobs", operation_class=JOBS, opt=FT)
    async def list_jobs(
        self,
        principal: Principal,
        db_session: AsyncSession,
        limit: Limit = 20,
        after: str | None = None,
    ) -> dict[str, Any]:
        """The tenant's jobs, newest first."""
        jobs = JobService(db_session)
        rows = await jobs.list(_tenant(principal), limit + 1, after)
        data = [job_object(j, *await jobs.file_ids(j)) for j in rows[:limit]]
        return {"object": "list", "data": data, "has_more": len(rows) > limit}

    @get(JOB, operation_id="RetrieveFineTuningJob", operation_class=ONE_JOB, opt=FT)
    async def get_job(
        self, job_id: str, principal: Principal, db_session: AsyncSession
    ) -> dict[str, Any]:
        """One job."""
        jobs = JobService(db_session)
        job = await jobs.get(_tenant(principal), job_id)
        return job_object(job, *await jobs.file_ids(job))

    @get(JOB + "/events", operation_id="ListFineTuningEvents", opt=FT)
    async def events(
        self, job_id: str, principal: Principal, db_session: AsyncSession, limit: Limit = 20
    ) -> dict[str, Any]:
        """The job's events, newest first: messages and metrics (step, loss, lr, tokens/s, ETA)."""
        jobs = JobService(db_session)
        rows = await jobs.events(await jobs.get(_tenant(principal), job_id), limit + 1)
        return {
            "object": "list",
            "data": [event_object(e) for e in rows[:limit]],
            "has_more": len(rows) > limit,
        }

    @get(JOB + "/checkpoints", operation_id="ListFineTuningCheckpoints", opt=FT)
    async def checkpoints(
        self, job_id: str, principal: Principal, db_session: AsyncSession, limit: Limit = 10
    ) -> dict[str, Any]:
        """The job's checkpoints, newest first."""
        jobs = JobService(db_session)
        job = await jobs.get(_tenant(principal), job_id)
        rows = await jobs.checkpoints(job, limit + 1)
        return {
            "object": "list",
            "data": [checkpoint_object(c, job) for c in rows[:limit]],
            "has_more": len(rows) > limit,
        }

    @post(
        JOB + "/cancel",
        operation_id="CancelFineTuningJob",
        operation_class=ONE_JOB,
        opt=FT,
        status_code=200,
    )
    async def cancel(
        self, job_id: str, principal: Principal, db_session: AsyncSession, budgets: BudgetGuard
    ) -> dict[str, Any]:
        """Cancel a job; one not yet running ends at once, and is charged nothing."""
        jobs = JobService(db_session)
        job = await jobs.cancel(_tenant(principal), job_id, principal.actor)
        await db_session.commit()
        await settle_job(budgets.quotas, db_session, job)
        return job_object(job, *await jobs.file_ids(job))
