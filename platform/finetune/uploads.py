"""A JSONL file uploaded as multipart/form-data, kept as a tenant's file: the one path that
`POST /v1/files` (fine-tuning and eval items) and the console's upload form share."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from litestar import Request

from loraplex.api.multipart import save_multipart, upload_workdir
from loraplex.db.models import DatasetFile
from loraplex.errors import InvalidInput
from loraplex.finetune.files import FileService
from loraplex.settings import Settings


async def upload_jsonl_file(
    request: Request[Any, Any, Any],
    files: FileService,
    settings: Settings,
    tenant_id: UUID,
    actor: str,
    *,
    purpose: str | None = None,
    refusal: str = "send exactly one file",
    refuse_empty: bool = False,
) -> DatasetFile:
    """Receive the body's one file (at most `max_training_file_bytes`, into a work folder
    removed afterwards), then validate, store and register it (`FileService.upload`).

    `purpose` is the form's `purpose` field when not given. A body with another number of
    files, or (with `refuse_empty`) an empty one, is a 400 saying `refusal`.
    """
    with upload_workdir(settings.data_dir) as workdir:
        received, fields = await save_multipart(request, workdir, settings.max_training_file_bytes)
        if len(received) != 1 or (refuse_empty and _is_empty(received[0])):
            raise InvalidInput(refusal, param="file")
        path = received[0]
        return await files.upload(
            tenant_id,
            fields.get("purpose", "") if purpose is None else purpose,
            path,
            path.name,
            settings.max_training_file_bytes,
            actor,
        )


def _is_empty(path: Path) -> bool:
    return not path.stat().st_size
