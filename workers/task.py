"""`worker_task`: the one way a Celery task is declared here.

Every task gets the same treatment, so none can forget a part of it: a hard and a soft time
limit, retries with backoff for failures that may pass (a database or object-store blip), a
log line when it starts, ends or fails, Prometheus counts and durations, and the process's
shared loop, engine and store (`loraplex.workers.process`). A task body is an async function
of a `TaskContext` and the task's string arguments.

Retrying is safe because every job step starts with a compare-and-set on the job's status.
When the retries are spent, `on_give_up` runs: a job task moves its job to `failed` with an
error event, so a job never waits forever on a task that no longer exists.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from prometheus_client import Counter, Histogram
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.finetune.queue import JobQueue, TaskName
from loraplex.settings import Settings
from loraplex.workers.process import worker_process

log = logging.getLogger("loraplex.workers")

TASK_RUNS = Counter(
    "loraplex_worker_task_runs",
    "Worker task runs by task and outcome (succeeded | retried | failed).",
    ["task", "outcome"],
)
TASK_SECONDS = Histogram(
    "loraplex_worker_task_seconds",
    "Worker task run time, one observation per try.",
    ["task"],
    buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600),
)
SOFT_LIMIT_GRACE_S = 60  # between the soft limit (the task may clean up) and the hard kill
MAX_BACKOFF_S = 300


@dataclass(frozen=True, slots=True)
class TaskContext:
    """What a task body works with; the same engine and store for every task of a process."""

    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    store: Any
    queue: JobQueue  # sends through the Celery app this task runs in


Body = Callable[..., Awaitable[None]]
GiveUp = Callable[..., Awaitable[None]]  # (context, exception, *task arguments)


def backoff_s(retries: int) -> float:
    """Seconds before try `retries + 2`: 10, 20, 40, ... up to MAX_BACKOFF_S."""
    return float(min(MAX_BACKOFF_S, 10 * 2**retries))


def worker_task(
    name: TaskName,
    *,
    time_limit_s: int,
    retries: int = 0,
    acks_late: bool = False,
    on_give_up: GiveUp | None = None,
) -> Callable[[Body], Any]:
    """Register `body` as the Celery task `name` with limits, retries, logs and metrics."""

    def register(body: Body) -> Any:
        @shared_task(
            bind=True,
            name=name.value,
            time_limit=time_limit_s,
            soft_time_limit=max(1, time_limit_s - SOFT_LIMIT_GRACE_S),
            max_retries=retries,
            acks_late=acks_late,
            reject_on_worker_lost=False,
        )
        @functools.wraps(body)
        def run(task: Any, *args: str) -> None:
            process = worker_process(task.app.conf.get("loraplex_settings"))
            context = TaskContext(
                process.settings, process.sessions, process.store, JobQueue(task.app)
            )
            attempt = task.request.retries + 1
            shown = args[:1]  # the job's id: a later argument may be a sealed secret
            log.info("%s%s started (try %d of %d)", name.value, shown, attempt, retries + 1)
            started = time.monotonic()
            try:
                process.run(body(context, *args))
            except Exception as exc:
                TASK_SECONDS.labels(name.value).observe(time.monotonic() - started)
                timed_out = isinstance(exc, SoftTimeLimitExceeded)
                if attempt <= retries and not timed_out:
                    TASK_RUNS.labels(name.value, "retried").inc()
                    log.warning("%s%s failed, retrying: %r", name.value, shown, exc)
                    raise task.retry(exc=exc, countdown=backoff_s(task.request.retries)) from exc
                TASK_RUNS.labels(name.value, "failed").inc()
                log.exception("%s%s failed after %d tries", name.value, shown, attempt)
                if on_give_up is not None:
                    _give_up(process.run, on_give_up(context, exc, *args), name)
                raise
            TASK_SECONDS.labels(name.value).observe(time.monotonic() - started)
            TASK_RUNS.labels(name.value, "succeeded").inc()
            log.info("%s%s done in %.1fs", name.value, shown, time.monotonic() - started)

        return run

    return register


def _give_up(run: Callable[[Any], Any], coroutine: Any, name: TaskName) -> None:
    """Run the give-up step; its own failure is logged, never raised over the task's."""
    try:
        run(coroutine)
    except Exception:
        log.exception("%s: could not record the failure on its job", name.value)
