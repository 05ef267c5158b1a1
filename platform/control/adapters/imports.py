"""Adapter imports, the API side: check a source, record the job, queue it (sealed).

The worker (`loraplex.workers.adapter_import`) fetches the files and hands them to the same
`VersionService.upload` an upload goes through. The job row shows the source without its
secrets: credentials and a URL's query (a presigned URL's signature) travel only in the
task message, sealed with the platform's secret.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import msgspec
from advanced_alchemy.repository import SQLAlchemyAsyncRepository
from advanced_alchemy.service import SQLAlchemyAsyncRepositoryService
from litestar import Request
from sqlalchemy import func, select

from loraplex.adapters.fetch import (
    HubSource,
    S3Source,
    Source,
    UrlSource,
    archive_or_folder,
    source_to_message,
)
from loraplex.auth.sealed import seal
from loraplex.control.adapters.import_schemas import (
    ImportCreate,
    ImportEvent,
    ImportOut,
    ImportProblem,
    ImportSourceIn,
)
from loraplex.control.audit.service import record
from loraplex.control.tenants.service import lock_tenant
from loraplex.db.models import Adapter, AdapterImport, AdapterVersion, ImportStatus
from loraplex.errors import InvalidInput, NotFound, PayloadTooLarge, TooManyRequests, Unavailable
from loraplex.finetune.queue import JobQueue
from loraplex.settings import Settings

MAX_IMPORT_BODY_BYTES = 16 * 1024
# Imports of one tenant queued or running at once: each holds a worker for minutes, and
# the worker pool is shared by every tenant's fine-tune validations and imports.
MAX_ACTIVE_IMPORTS = 4
ACTIVE = (ImportStatus.QUEUED, ImportStatus.FETCHING, ImportStatus.VALIDATING)
SHAPES = "a folder (ending in /) or a .tar.gz, .tgz, .tar or .zip archive"


def is_json(request: Request[Any, Any, Any]) -> bool:
    """Whether the request sends a JSON body (an import) rather than files."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media == "application/json"


async def read_import_request(request: Request[Any, Any, Any]) -> ImportCreate:
    """The import body, at most MAX_IMPORT_BODY_BYTES, decoded and checked field by field."""
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > MAX_IMPORT_BODY_BYTES:
            raise PayloadTooLarge(f"an import body is at most {MAX_IMPORT_BODY_BYTES} bytes")
    try:
        return msgspec.json.decode(bytes(body), type=ImportCreate)
    except msgspec.ValidationError as exc:
        raise _named(str(exc)) from exc
    except (msgspec.DecodeError, RecursionError) as exc:
        raise InvalidInput("the import body is not valid JSON", param="source") from exc


# What each field must look like, in words: msgspec's message quotes the regex, and a
# client-visible error shows no URL (tests/support/hygiene.py).
FORMS = {
    "source.url": "an HTTPS URL of a folder (ending in /) or an archive",
    "source.s3.url": "an S3 URL of a bucket and a folder (ending in /) or an archive",
    "source.s3.endpoint_url": "an HTTP or HTTPS URL without credentials or query",
    "source.s3.region": "a region name such as us-east-1",
    "source.hub.repo": "<organisation>/<name>",
    "source.hub.revision": "a branch, tag or commit",
}


def _named(message: str) -> InvalidInput:
    """msgspec's validation message as a 400 naming the field, without its regex."""
    path = message.rsplit(" - at `$.", 1)[-1].rstrip("`") if " - at `$." in message else "source"
    if "matching regex" in message or "length" in message:
        form = FORMS.get(path, "printable text of a sensible length")
        return InvalidInput(f"{path} must be {form}", param=path)
    return InvalidInput(f"invalid import request: {message.split(' - at ')[0]}", param=path)


def source_of(given: ImportSourceIn) -> Source:
    """The one source the request names, or a 400 naming what is wrong with it."""
    named = [k for k in ("s3", "url", "hub") if getattr(given, k) is not None]
    if len(named) != 1:
        raise InvalidInput("name exactly one source: s3, url or hub", param="source")
    if given.s3 is not None:
        bucket, _, key = given.s3.url.removeprefix("s3://").partition("/")
        if archive_or_folder(key) is None:
            raise InvalidInput(f"the s3 URL must name {SHAPES}", param="source.s3.url")
        return S3Source(
            bucket=bucket,
            key=key,
            access_key_id=given.s3.access_key_id,
            secret_access_key=given.s3.secret_access_key,
            session_token=given.s3.session_token or "",
            endpoint_url=given.s3.endpoint_url or "",
            region=given.s3.region,
        )
    if given.url is not None:
        path = given.url.split("?", 1)[0].removeprefix("https://").partition("/")[2]
        if archive_or_folder(path) is None:
            raise InvalidInput(f"the URL must name {SHAPES}", param="source.url")
        return UrlSource(url=given.url)
    assert given.hub is not None
    return HubSource(given.hub.repo, given.hub.revision, given.hub.token or "")


def shown_source(source: Source) -> dict[str, Any]:
    """What of the source may be stored and shown: no key, secret, token or query."""
    if isinstance(source, S3Source):
        shown = {"kind": "s3", "url": f"s3://{source.bucket}/{source.key}"}
        shown["region"] = source.region
        if source.endpoint_url:
            shown["endpoint_url"] = source.endpoint_url
        return shown
    if isinstance(source, UrlSource):
        return {"kind": "url", "url": source.url.split("?", 1)[0]}
    return {"kind": "hub", "repo": source.repo, "revision": source.revision}


class ImportService(SQLAlchemyAsyncRepositoryService[AdapterImport]):
    """Import jobs of a tenant's adapters."""

    class Repo(SQLAlchemyAsyncRepository[AdapterImport]):
        """Adapter imports."""

        model_type = AdapterImport

    repository_type = Repo

    async def start(
        self,
        adapter: Adapter,
        data: ImportCreate,
        actor: str,
        queue: JobQueue,
        settings: Settings,
    ) -> AdapterImport:
        """Record a queued import of `data.source` and send it to a worker."""
        source = source_of(data.source)
        session = self.repository.session
        await self._check_active(adapter.tenant_id)
        job = AdapterImport(
            tenant_id=adapter.tenant_id,
            adapter_id=adapter.id,
            status=ImportStatus.QUEUED,
            source=shown_source(source),
            actor=actor,
            events=[event("queued")],
        )
        session.add(job)
        await session.flush()
        record(
            session,
            actor,
            "adapter_import.create",
            job,
            tenant_id=adapter.tenant_id,
            adapter=adapter.name,
            source=job.source,
        )
        await session.commit()  # the worker must find the job
        try:
            queue.import_adapter(job.id, seal(settings.secret_key, source_to_message(source)))
        except Exception as exc:  # the broker: whatever kombu raises, the job cannot run
            job.status = ImportStatus.FAILED
            job.error = {"code": "queue_unavailable", "message": "the job queue is unavailable"}
            await session.commit()
            raise Unavailable(
                "the job queue is unavailable; retry later", headers={"Retry-After": "30"}
            ) from exc
        return job

    async def _check_active(self, tenant_id: UUID) -> None:
        session = self.repository.session
        await lock_tenant(session, tenant_id)  # two starts at once must not both fit
        active = await session.scalar(
            select(func.count(AdapterImport.id)).where(
                AdapterImport.tenant_id == tenant_id, AdapterImport.status.in_(ACTIVE)
            )
        )
        if (active or 0) >= MAX_ACTIVE_IMPORTS:
            raise TooManyRequests(
                f"{MAX_ACTIVE_IMPORTS} imports are already queued or running; "
                "start another once one has finished",
                headers={"Retry-After": "30"},
            )

    async def of_adapter(self, adapter: Adapter, import_id: UUID) -> AdapterImport:
        """The adapter's import `import_id`, or 404."""
        job = await self.get_one_or_none(id=import_id, adapter_id=adapter.id)
        if job is None:
            raise NotFound(f"import {import_id} of adapter '{adapter.name}' not found")
        return job

    async def to_out(self, adapter: Adapter, job: AdapterImport) -> ImportOut:
        """The API view of an import."""
        number = None
        if job.version_id is not None:
            version = await self.repository.session.get(AdapterVersion, job.version_id)
            number = version.number if version else None
        return ImportOut(
            id=job.id,
            adapter=adapter.name,
            status=job.status,
            source=job.source,
            bytes_fetched=job.bytes_fetched,
            version=number,
            error=ImportProblem(**job.error) if job.error else None,
            events=[
                ImportEvent(at=datetime.fromisoformat(e["at"]), message=e["message"])
                for e in job.events
            ],
            created_at=job.created_at,
            updated_at=job.updated_at,
        )


def event(message: str) -> dict[str, str]:
    """A progress event as the job row keeps it."""
    return {"at": datetime.now(UTC).isoformat(), "message": message}
