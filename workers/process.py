"""What the tasks of one worker process share: an event loop, a database engine, a store.

A task used to build a database engine (and its pool) on every call and dispose of it at
the end, paying the connection set-up each time; a fresh `asyncio.run` loop per call forced
that, since asyncpg connections belong to the loop that opened them. One long-lived loop per
process lets one engine serve every task the process runs.

Keyed by the process id: Celery's prefork pool forks children from the parent, and a child
must not use a loop or pooled connections it inherited, so it builds its own on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from celery.signals import worker_process_shutdown, worker_shutdown
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.connections import open_object_store
from loraplex.db.config import sqlalchemy_config
from loraplex.settings import Settings

T = TypeVar("T")


class WorkerProcess:
    """One worker process's loop, database engine and object store."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.config = sqlalchemy_config(settings)
        self.sessions: async_sessionmaker[AsyncSession] = self.config.create_session_maker()
        self.store = open_object_store(settings)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` to its end on this process's loop.

        An exception raised from outside the coroutine (Celery's soft time limit arrives as a
        signal and may land while the loop waits) would leave it pending on the loop; it is
        cancelled and driven to its end, so the next task starts on a clean loop.
        """
        task = self.loop.create_task(coroutine)
        try:
            return self.loop.run_until_complete(task)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    self.loop.run_until_complete(task)

    def close(self) -> None:
        """Close the engine's connections and the loop."""
        with contextlib.suppress(Exception):
            self.loop.run_until_complete(self.config.get_engine().dispose())
        self.loop.close()


_current: WorkerProcess | None = None


def worker_process(settings: Settings | None) -> WorkerProcess:
    """This process's shared resources, built on first use (or for new settings)."""
    global _current
    current = _current
    if current is not None and current.pid == os.getpid():
        if settings is None or settings is current.settings:
            return current
        current.close()
    _current = WorkerProcess(settings or Settings.from_env())
    return _current


@worker_process_shutdown.connect
@worker_shutdown.connect
def close_worker_process(**_: Any) -> None:
    """Let go of the engine's connections when the worker process exits."""
    global _current
    if _current is not None and _current.pid == os.getpid():
        _current.close()
    _current = None
