"""The API's sender and the workers' Celery app agree on queue and task names."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import uuid4

from loraplex.finetune.queue import JobQueue, Queue, TaskName
from loraplex.settings import Settings
from loraplex.workers.celery_app import make_celery
from loraplex.workers.cli import ALL_QUEUES


class Recorder:
    """A Celery app's `send_task`, recording what would go to the broker."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[Any], str]] = []

    def send_task(self, name: str, args: list[Any], queue: str) -> None:
        self.sent.append((name, args, queue))


def test_validation_goes_to_default_and_training_to_the_gpu_queue() -> None:
    app, job_id = Recorder(), uuid4()
    queue = JobQueue(app)
    queue.validate(job_id)
    queue.train(job_id)
    assert app.sent == [
        ("loraplex.finetune.validate", [str(job_id)], "default"),
        ("loraplex.finetune.train", [str(job_id)], "train"),
    ]


def test_the_celery_app_declares_routes_and_registers_the_same_names(tmp_path: Path) -> None:
    app = make_celery(Settings(data_dir=tmp_path))
    assert [q.name for q in app.conf.task_queues] == [q.value for q in Queue]
    assert app.conf.task_default_queue == Queue.DEFAULT
    route = app.amqp.router.route
    assert route({}, TaskName.TRAIN.value)["queue"].name == "train"
    assert route({}, TaskName.VALIDATE.value)["queue"].name == "default"
    # The names on the broker are unchanged, so queued messages and older workers still match.
    assert {t.value for t in TaskName} <= set(app.tasks) and {t.value for t in TaskName} == {
        "loraplex.finetune.validate",
        "loraplex.finetune.train",
        "loraplex.finetune.reap",
        "loraplex.adapters.reap",
        "loraplex.adapters.import",
        "loraplex.evals.run",
    }
    assert sorted(ALL_QUEUES.split(",")) == sorted(Queue)
