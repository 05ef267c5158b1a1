"""The console's fine-tuning pages: training files, jobs, and a job's live progress and loss.

The same services as `/v1/files` and `/v1/fine_tuning/jobs`; a job created here is queued
for the workers exactly as one created with OpenAI's SDK.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from litestar import Controller, Request, Response, get, post
from litestar.datastructures import FormMultiDict
from litestar.di import Provide
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.adapters.store import ObjectStore
from loraplex.control.adapters.aliases import AliasService
from loraplex.control.adapters.service import AdapterService
from loraplex.cpu_pool import CpuPool
from loraplex.errors import Conflict
from loraplex.finetune.files import PURPOSE, FileService
from loraplex.finetune.ids import FILE, JOB, public
from loraplex.finetune.permissions import TENANT_ADMIN
from loraplex.finetune.queue import JobQueue
from loraplex.finetune.schemas import JobCreate
from loraplex.finetune.service import JobService
from loraplex.finetune.uploads import upload_jsonl_file
from loraplex.settings import Settings
from loraplex.web import finetune_reads, reads
from loraplex.web.console import provide_tenant_id
from loraplex.web.forms import convert, decimal, number
from loraplex.web.session import Viewer

DEFAULT_ALIAS = "prod"  # what "Point alias" moves when its field is left empty


class FineTuneController(Controller):
    """`/console/fine-tunes`: upload a training file, start a job, watch it train."""

    path = "/console/fine-tunes"
    dependencies = {"tenant_id": Provide(provide_tenant_id, sync_to_thread=False)}

    @get("/", name="console.fine_tunes")
    async def jobs_page(
        self, tenant_id: UUID, db_session: AsyncSession, store: ObjectStore
    ) -> Template:
        """Jobs (newest first), files, and the form for a new job."""
        jobs = await JobService(db_session).list(tenant_id, 50, None)
        files = await FileService(db_session, store).list(tenant_id)
        models = await reads.base_model_names(db_session)
        context = {
            "jobs": [(public(JOB, j.id), j) for j in jobs],
            "files": [(public(FILE, f.id), f) for f in files],
            "models": models,
        }
        return Template("console/fine_tunes.html", context=context)

    @post("/files", status_code=201, request_max_body_size=None)
    async def upload_file(
        self,
        request: Request[Any, Any, Any],
        tenant_id: UUID,
        editor: Viewer,
        db_session: AsyncSession,
        store: ObjectStore,
        settings: Settings,
        cpu_pool: CpuPool,
    ) -> Response[Any]:
        """A JSONL training file, validated as `/v1/files` validates it; then the page again."""
        files = FileService(db_session, store, cpu_pool)
        await upload_jsonl_file(
            request, files, settings, tenant_id, editor.actor,
            purpose=PURPOSE, refusal="choose one JSONL file", refuse_empty=True,
        )  # fmt: skip
        return Response(b"", status_code=201, headers={"HX-Refresh": "true"})

    @post("/files/{file_id:str}/delete", status_code=200)
    async def delete_file(
        self,
        tenant_id: UUID,
        file_id: str,
        editor: Viewer,
        db_session: AsyncSession,
        store: ObjectStore,
    ) -> Response[Any]:
        """Delete a training file no active job uses, as `DELETE /v1/files/{id}` does."""
        await FileService(db_session, store).delete(tenant_id, file_id, editor.actor)
        return Response(b"", status_code=200, headers={"HX-Refresh": "true"})

    @post("/", status_code=201)
    async def create_job(
        self,
        tenant_id: UUID,
        editor: Viewer,
        form: FormMultiDict,
        db_session: AsyncSession,
        job_queue: JobQueue,
    ) -> Response[Any]:
        """Queue a job for the workers and open its page."""
        hyper = {
            "n_epochs": number(form, "n_epochs") or "auto",
            "learning_rate_multiplier": decimal(form, "learning_rate_multiplier") or "auto",
            "batch_size": number(form, "batch_size") or "auto",
        }
        if (rank := number(form, "lora_r")) is not None:
            hyper["lora_r"] = rank
        fields = {
            "model": form.get("model", ""),
            "training_file": form.get("training_file", ""),
            "suffix": str(form.get("suffix", "")).strip() or None,
            "alias": str(form.get("alias", "")).strip() or None,
            "hyperparameters": hyper,
        }
        data = convert({k: v for k, v in fields.items() if v is not None}, JobCreate)
        job = await JobService(db_session).create(
            tenant_id, data, editor.actor, job_queue, rights=TENANT_ADMIN
        )
        where = f"/console/fine-tunes/{public(JOB, job.id)}"
        return Response(b"", status_code=201, headers={"HX-Redirect": where})

    @get("/{job_id:str}", name="console.fine_tune")
    async def job_page(self, tenant_id: UUID, job_id: str, db_session: AsyncSession) -> Template:
        """One job: its settings, files and times, progress, the loss curve, checkpoints,
        events and the adapter it made; the live part refreshes while it runs."""
        view = await finetune_reads.job_page(db_session, tenant_id, job_id)
        return Template("console/fine_tune.html", context={"v": view})

    @get("/{job_id:str}/live")
    async def job_live(self, tenant_id: UUID, job_id: str, db_session: AsyncSession) -> Template:
        """The live part of the job page, polled by htmx until the job ends."""
        return await _live(db_session, tenant_id, job_id)

    @post("/{job_id:str}/cancel", status_code=200)
    async def cancel(
        self, tenant_id: UUID, job_id: str, editor: Viewer, db_session: AsyncSession
    ) -> Template:
        """Ask the workers to stop the job."""
        await JobService(db_session).cancel(tenant_id, job_id, editor.actor)
        return await _live(db_session, tenant_id, job_id)

    @post("/{job_id:str}/alias", status_code=200)
    async def point_alias(
        self,
        tenant_id: UUID,
        job_id: str,
        form: FormMultiDict,
        editor: Viewer,
        db_session: AsyncSession,
    ) -> Template:
        """Point an alias (`prod` unless named) of the job's adapter at the version it made,
        through the same service as the adapter page's promote; answers the result card."""
        alias = str(form.get("alias", "")).strip() or DEFAULT_ALIAS
        await _point_at_result(db_session, tenant_id, job_id, alias, editor.actor)
        context = {
            "v": await finetune_reads.job_page(db_session, tenant_id, job_id),
            "pointed": alias,
        }
        return Template("console/_fine_tune_result.html", context=context)


async def _point_at_result(
    session: AsyncSession, tenant_id: UUID, job_id: str, alias: str, actor: str
) -> None:
    """Point `alias` of the job's adapter at the version the job made (409 before it made one)."""
    job = await JobService(session).get(tenant_id, job_id)
    result = await finetune_reads.result_of(session, job)
    if result is None:
        raise Conflict(f"job {job_id} has made no adapter version to point an alias at")
    adapter = await AdapterService(session=session).named(tenant_id, result.adapter)
    await AliasService(session=session).point(adapter, alias, result.number, actor)


async def _live(session: AsyncSession, tenant_id: UUID, job_id: str) -> Template:
    view = await finetune_reads.job_page(session, tenant_id, job_id)
    return Template("console/_fine_tune_live.html", context={"v": view})
