"""The queues and task names the API and the workers agree on, and the API's sender.

Both sides read the names from here: `loraplex.workers.celery_app` declares the queues and
routes from `Queue` and `QUEUE_OF`, the workers register their tasks under `TaskName`, and
`JobQueue` sends by name, so the API process never imports the workers or the trainer. The
task names are what travels over the broker: changing one strands the messages already queued
and breaks workers still running the old code.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any
from uuid import UUID


class Queue(StrEnum):
    """The broker queues: GPU workers consume `train`, any worker `default`."""

    DEFAULT = "default"
    TRAIN = "train"


class TaskName(StrEnum):
    """The name each Celery task is registered and sent under."""

    VALIDATE = "loraplex.finetune.validate"
    TRAIN = "loraplex.finetune.train"
    REAP_JOBS = "loraplex.finetune.reap"
    REAP_ADAPTER_OBJECTS = "loraplex.adapters.reap"
    IMPORT_ADAPTER = "loraplex.adapters.import"
    RUN_EVAL = "loraplex.evals.run"


# Only training needs a GPU worker; everything else is light and goes to `default`.
QUEUE_OF = {TaskName.TRAIN: Queue.TRAIN}


def queue_of(task: TaskName) -> Queue:
    """The queue `task` is routed to."""
    return QUEUE_OF.get(task, Queue.DEFAULT)


class JobQueue:
    """Sends fine-tuning tasks through one configured Celery app.

    The app is built once per process (the API at start-up; a worker task passes the app it
    runs in): building one per send would open a new broker connection pool every time.
    """

    def __init__(self, celery: Any):
        self.celery = celery

    def validate(self, job_id: UUID) -> None:
        """Queue the file validation of a new job."""
        self._send(TaskName.VALIDATE, job_id)

    def train(self, job_id: UUID) -> None:
        """Queue the training of a validated (or requeued) job."""
        self._send(TaskName.TRAIN, job_id)

    def import_adapter(self, import_id: UUID, sealed_source: str) -> None:
        """Queue an adapter import; its source (credentials included) travels sealed."""
        self._send(TaskName.IMPORT_ADAPTER, import_id, sealed_source)

    def run_eval(self, run_id: UUID) -> None:
        """Queue an eval run (generation through the API, then grading)."""
        self._send(TaskName.RUN_EVAL, run_id)

    def _send(self, task: TaskName, job_id: UUID, *more: str) -> None:
        self.celery.send_task(task.value, args=[str(job_id), *more], queue=queue_of(task).value)
