"""The Celery application: the queues of `loraplex.finetune.queue.Queue`, the beat schedule.

The broker is `LORAPLEX_BROKER_URL`, else Redis (`LORAPLEX_REDIS_URL`), else — the embedded
mode of `loraplex up` — kombu's filesystem transport in `<data_dir>/broker`, which needs no
server: the API, the worker and beat on one machine pass messages as files there.

Built by `make_celery(settings)` — nothing connects at import time. Tasks are registered by
name in `loraplex.workers.tasks`, and the API sends them by name (loraplex.finetune.queue),
so the API process never imports torch. Each process builds one app and keeps it: the API at
start-up, a worker in `loraplex worker`, whose tasks enqueue through the app they run in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery import Celery
from kombu import Queue as BrokerQueue

from loraplex.finetune.queue import QUEUE_OF, Queue, TaskName
from loraplex.settings import Settings


def make_celery(settings: Settings) -> Celery:
    """A Celery app for these settings, with queues, routes, beat schedule and tasks."""
    url, transport_options = broker(settings)
    app = Celery("loraplex", broker=url, set_as_current=True)
    app.conf.update(
        broker_transport_options=transport_options,
        task_queues=tuple(BrokerQueue(q.value) for q in Queue),
        task_default_queue=Queue.DEFAULT.value,
        task_routes={task.value: {"queue": queue.value} for task, queue in QUEUE_OF.items()},
        worker_prefetch_multiplier=1,  # one training job per worker process at a time
        broker_connection_retry_on_startup=True,
        task_ignore_result=True,
        worker_hijack_root_logger=False,
        beat_schedule={
            "reap-stuck-fine-tunes": {
                "task": TaskName.REAP_JOBS.value,
                "schedule": settings.job_reap_interval_s,
            },
            "reap-orphan-adapter-objects": {
                "task": TaskName.REAP_ADAPTER_OBJECTS.value,
                "schedule": 3600.0,
            },
        },
    )
    app.conf.loraplex_settings = settings
    from loraplex.workers import tasks  # noqa: F401 - registers the tasks on this app

    return app


def broker(settings: Settings) -> tuple[str, dict[str, Any]]:
    """The broker URL and its transport options for these settings."""
    url = settings.broker_url or settings.redis_url
    if url:
        prefix = settings.broker_key_prefix
        return url, ({"global_keyprefix": prefix} if prefix else {})
    folder = filesystem_broker_dir(settings.data_dir)
    return "filesystem://", {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "processed_folder": str(folder / "processed"),
        "control_folder": str(folder / "control"),  # default: ./control in the cwd
        "store_processed": False,
    }


def filesystem_broker_dir(data_dir: Path) -> Path:
    """The embedded broker's message folder (made if missing)."""
    folder = data_dir / "broker"
    for sub in ("processed", "control"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return folder
