"""`loraplex worker` and `loraplex beat`: the Celery processes."""

from __future__ import annotations

import socket

import click

from loraplex.finetune.queue import Queue
from loraplex.settings import Settings

ALL_QUEUES = ",".join(q.value for q in (Queue.TRAIN, Queue.DEFAULT))


@click.command()
@click.option("--queues", "-Q", default=ALL_QUEUES, show_default=True, help="queues to consume")
@click.option(
    "--concurrency", "-c", default=1, show_default=True, help="worker processes (one per GPU)"
)
@click.option("--name", "-n", default=None, help="worker name (default: loraplex@<host>)")
@click.pass_obj
def worker(settings: Settings, queues: str, concurrency: int, name: str | None) -> None:
    """Run a Celery worker: fine-tuning on `train`, validation and housekeeping on `default`."""
    from loraplex.workers.celery_app import make_celery

    app = make_celery(settings)
    app.worker_main(
        [
            "worker",
            "-Q",
            queues,
            "-c",
            str(concurrency),
            "-n",
            name or f"loraplex@{socket.gethostname()}",
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
        ]
    )


@click.command()
@click.pass_obj
def beat(settings: Settings) -> None:
    """Run Celery beat: reaps stuck jobs and orphaned adapter objects on a schedule."""
    from loraplex.workers.celery_app import make_celery

    app = make_celery(settings)
    schedule = settings.data_dir / "celerybeat-schedule"
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    app.start(["beat", "--loglevel", "INFO", "--schedule", str(schedule)])
