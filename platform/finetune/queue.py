"""Hands work to the Celery workers by task name, so the API never imports the trainer."""

from __future__ import annotations

from typing import Any
from uuid import UUID

VALIDATE_TASK = "loraplex.finetune.validate"
TRAIN_TASK = "loraplex.finetune.train"


class JobQueue:
    """Sends fine-tuning tasks to their queues."""

    def __init__(self, celery: Any):
        self.celery = celery

    def validate(self, job_id: UUID) -> None:
        """Queue the file validation of a new job (queue `default`)."""
        self.celery.send_task(VALIDATE_TASK, args=[str(job_id)], queue="default")

    def train(self, job_id: UUID) -> None:
        """Queue the training of a validated job (queue `train`)."""
        self.celery.send_task(TRAIN_TASK, args=[str(job_id)], queue="train")
