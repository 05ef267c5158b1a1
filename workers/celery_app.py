"""The Celery application: Redis broker, queues `train` (GPU workers) and `default`.

Built by `make_celery(settings)` — nothing connects at import time. Tasks are registered by
name in `loraplex.workers.tasks`, and the API sends them by name (loraplex.finetune.queue),
so the API process never imports torch.
"""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from loraplex.settings import Settings


def make_celery(settings: Settings) -> Celery:
    """A Celery app for these settings, with queues, routes, beat schedule and tasks."""
    app = Celery("loraplex", broker=settings.redis_url or "memory://", set_as_current=True)
    app.conf.update(
        task_queues=(Queue("default"), Queue("train")),
        task_default_queue="default",
        task_routes={"loraplex.finetune.train": {"queue": "train"}},
        worker_prefetch_multiplier=1,  # one training job per worker process at a time
        broker_connection_retry_on_startup=True,
        task_ignore_result=True,
        worker_hijack_root_logger=False,
        beat_schedule={
            "reap-stuck-fine-tunes": {
                "task": "loraplex.finetune.reap",
                "schedule": settings.job_reap_interval_s,
            },
            "reap-orphan-adapter-objects": {"task": "loraplex.adapters.reap", "schedule": 3600.0},
        },
    )
    app.conf.loraplex_settings = settings
    from loraplex.workers import tasks  # noqa: F401 - registers the tasks on this app

    return app
