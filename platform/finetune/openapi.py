"""How the files and fine-tuning routes appear in the OpenAPI document.

`POST /v1/files` streams its multipart body to disk and `POST /v1/fine_tuning/jobs` decodes
`JobCreate` itself, so Litestar sees neither body; these `operation_class`es describe them,
and the objects `schemas.py` answers with, without touching how a request is parsed.
"""

from __future__ import annotations

from typing import Any

from loraplex.api.openapi import documented
from loraplex.finetune.schemas import JobCreate

_INT = {"type": "integer"}
_STR = {"type": "string"}
_MAYBE_INT = {"type": ["integer", "null"]}
_MAYBE_STR = {"type": ["string", "null"]}

FILE_UPLOAD = {
    "title": "FileUpload",
    "type": "object",
    "required": ["file", "purpose"],
    "properties": {
        "file": {"type": "string", "format": "binary", "description": "JSONL training data"},
        "purpose": {"enum": ["fine-tune"]},
    },
}
FILE = {
    "title": "File",
    "type": "object",
    "required": ["id", "object", "bytes", "created_at", "filename", "purpose", "status"],
    "properties": {
        "id": _STR,
        "object": {"const": "file"},
        "bytes": _INT,
        "created_at": _INT,
        "filename": _STR,
        "purpose": _STR,
        "status": _STR,
        "status_details": {"description": "why the file was refused, if it was"},
    },
}
FILE_DELETED = {
    "title": "FileDeleted",
    "type": "object",
    "required": ["id", "object", "deleted"],
    "properties": {"id": _STR, "object": {"const": "file"}, "deleted": {"type": "boolean"}},
}
JOB = {
    "title": "FineTuningJob",
    "type": "object",
    "required": ["id", "object", "created_at", "model", "status", "training_file"],
    "properties": {
        "id": _STR,
        "object": {"const": "fine_tuning.job"},
        "created_at": _INT,
        "finished_at": _MAYBE_INT,
        "model": _STR,
        "fine_tuned_model": _MAYBE_STR,
        "organization_id": _STR,
        "status": _STR,
        "training_file": _MAYBE_STR,  # null once the file is deleted
        "validation_file": _MAYBE_STR,
        "hyperparameters": {"type": "object"},
        "method": {"type": "object"},
        "trained_tokens": _MAYBE_INT,
        "error": {"type": ["object", "null"]},
        "seed": _MAYBE_INT,
        "suffix": _MAYBE_STR,
        "estimated_finish": _MAYBE_INT,
    },
}


def _list_of(title: str, item: dict[str, Any]) -> dict[str, Any]:
    return {
        "title": title,
        "type": "object",
        "required": ["object", "data", "has_more"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": item},
            "has_more": {"type": "boolean"},
        },
    }


CREATE_FILE = documented(body=FILE_UPLOAD, body_media_type="multipart/form-data", ok=FILE)
ONE_FILE = documented(ok=FILE)
FILES = documented(ok=_list_of("FileList", FILE))
DELETE_FILE = documented(ok=FILE_DELETED)
CREATE_JOB = documented(body=JobCreate, ok=JOB)
ONE_JOB = documented(ok=JOB)
JOBS = documented(ok=_list_of("FineTuningJobList", JOB))
