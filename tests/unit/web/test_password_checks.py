"""Passwords are checked in worker threads, a few at a time, never on the event loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from loraplex.auth import passwords
from loraplex.auth.passwords import hash_password, verify_password
from loraplex.cpu_pool import CpuPool


async def test_a_right_and_a_wrong_password_and_no_hash_at_all() -> None:
    stored = hash_password("correct horse battery")
    assert await passwords.password_matches(stored, "correct horse battery")
    assert not await passwords.password_matches(stored, "wrong")
    assert not await passwords.password_matches(None, "correct horse battery")


async def test_checks_run_off_the_loop_at_most_a_few_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop_thread, running, most = threading.get_ident(), [0], [0]
    lock = threading.Lock()

    def slow_verify(stored: str, password: str) -> bool:
        assert threading.get_ident() != loop_thread, "argon2 ran on the event loop"
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return True

    monkeypatch.setattr(passwords, "verify_password", slow_verify)
    await asyncio.gather(*(passwords.password_matches("h", "p") for _ in range(8)))
    assert most[0] == passwords.MAX_CONCURRENT_CHECKS


async def test_the_loop_keeps_ticking_while_real_argon2_checks_run() -> None:
    stored = hash_password("correct horse battery")
    started = time.perf_counter()
    verify_password(stored, "guess")  # what one check on the loop would stall it for
    one_check_s = time.perf_counter() - started
    pauses: list[float] = []

    async def tick() -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            pauses.append(time.perf_counter() - started)

    ticker = asyncio.create_task(tick())
    await asyncio.gather(*(passwords.password_matches(stored, "guess") for _ in range(4)))
    ticker.cancel()
    assert max(pauses) < one_check_s / 2


async def test_in_a_worker_process_a_right_and_a_wrong_password_and_no_hash() -> None:
    pool = CpuPool(1, 512 * 2**20, timeout_s=60)
    try:
        stored = hash_password("correct horse battery")
        assert await passwords.password_matches(stored, "correct horse battery", pool)
        assert not await passwords.password_matches(stored, "wrong", pool)
        assert not await passwords.password_matches(None, "correct horse battery", pool)
    finally:
        pool.close()
