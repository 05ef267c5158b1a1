"""Worker processes for the CPU-heavy checks of tenant input, so none can stall the API.

Unpacking an archive, reading a safetensors header, scanning an adapter's values and
validating a training file are bounded (each parser checks bytes, entries, depth and number
sizes first), but they are CPU work by nature, and CPU work in a thread still holds the
GIL in pure-Python stretches (`json.loads`, `math.prod` on big integers, `zipfile`'s
directory walk): every stream of every tenant on the process waits. Here that work runs in
separate processes:

- `spawn`ed, not forked: the API process has threads (anyio's pool, boto3's transfers), and a
  fork copies their locks in whatever state they are in;
- each capped in address space (`RLIMIT_AS`), so a bomb that slips past a bound fails with
  `MemoryError` in the worker, not with the API pod's OOM kill;
- each at a lower CPU priority (nice 10): on a host where the API shares cores with its
  workers, serving streams comes before checking an upload;
- each call capped in time: past it the workers are killed and the pool is rebuilt, and the
  caller gets `CheckAbandoned`. A worker that dies for any reason is the same.

Embedded mode and tests use the same pool; the Celery worker calls the checks directly.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import resource
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import ParamSpec, TypeVar

from loraplex.errors import PayloadTooLarge

log = logging.getLogger("loraplex.cpu_pool")

P = ParamSpec("P")
T = TypeVar("T")


class CheckAbandoned(PayloadTooLarge):
    """A check ran out of its worker's time or memory; the input is refused as too costly."""


WORKER_NICENESS = 10


def _prepare_worker(max_bytes: int) -> None:
    """Worker start-up: yield the CPU to the API's streams, cap the address space (0: none)."""
    os.nice(WORKER_NICENESS)
    if max_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))


class CpuPool:
    """A small pool of worker processes; `run(fn, *args)` awaits `fn(*args)` run in one."""

    def __init__(self, workers: int, memory_bytes: int, timeout_s: float) -> None:
        self._workers = max(1, workers)
        self._memory_bytes = memory_bytes
        self._timeout_s = timeout_s
        self._executor: ProcessPoolExecutor | None = None

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn` in a worker; its exceptions are raised here (they must pickle)."""
        executor = self._running()
        future = executor.submit(fn, *args, **kwargs)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self._timeout_s)
        except TimeoutError:
            log.warning(
                "cpu_pool: %s ran past %.0f s; workers killed", fn.__name__, self._timeout_s
            )
            self._kill(executor)
            raise CheckAbandoned(
                f"checking the upload took longer than {self._timeout_s:.0f} s"
            ) from None
        except BrokenProcessPool:
            log.warning("cpu_pool: a worker died checking %s; pool rebuilt", fn.__name__)
            self._kill(executor)
            raise CheckAbandoned("checking the upload needed more memory than allowed") from None
        except MemoryError:
            raise CheckAbandoned("checking the upload needed more memory than allowed") from None

    def close(self) -> None:
        """Stop the workers (pending checks are cancelled)."""
        if self._executor is not None:
            self._kill(self._executor)

    def _running(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                max_workers=self._workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_prepare_worker,
                initargs=(self._memory_bytes,),
            )
        return self._executor

    def _kill(self, executor: ProcessPoolExecutor) -> None:
        """Kill `executor`'s workers now and forget it: the next call starts a fresh pool.

        `shutdown` alone would wait for a running check; the process handles are the
        executor's private `_processes` (stable since Python 3.2; 3.14 adds
        `terminate_workers()` for this).
        """
        if self._executor is executor:
            self._executor = None
        processes = list((getattr(executor, "_processes", None) or {}).values())
        for process in processes:
            process.kill()
        executor.shutdown(wait=False, cancel_futures=True)


async def run_check(pool: CpuPool | None, fn: Callable[P, T], *args: P.args) -> T:
    """`fn(*args)` in `pool`'s workers; without a pool (the Celery worker, which has no event
    loop shared with tenants' streams) in a thread."""
    if pool is not None:
        return await pool.run(fn, *args)
    return await asyncio.to_thread(fn, *args)
