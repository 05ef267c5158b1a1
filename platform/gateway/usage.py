"""Usage metering: counted in memory per request, upserted to the database in batches.

The gateway calls `UsageRecorder.record` once per finished (or cut) request. That call only
bumps counters in a dict keyed by (tenant, version, model, minute), so the hot path never
waits on the database. A background task flushes the aggregated rows with one upsert per
batch; a flush that fails puts its counts back, so the next flush writes them once.

The same call carries the request's spend (`SpendKey`: its key, adapter and cost at the
price it was admitted with), kept per (tenant, UTC day, model, key, adapter, kind) and
written in the same transaction as the usage rows: spend and billed tokens come from one
record of the request and cannot disagree.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar
from uuid import UUID

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.sql.dml import Insert

from loraplex.db.models.budgets import NOBODY, Spend
from loraplex.db.models.usage import BASE_MODEL_VERSION, COUNTERS, MODEL_NAME_MAX, Usage

log = logging.getLogger("loraplex.gateway.usage")
T = TypeVar("T")

# (tenant id, adapter version id or BASE_MODEL_VERSION, requested model, minutes since epoch)
UsageKey = tuple[UUID, UUID, str, int]
# (tenant id, days since epoch, requested model, key id, adapter id, base model, kind)
SpendGroup = tuple[UUID, int, str, UUID, UUID, str, str]
SPEND_COUNTERS = (
    "requests", "prompt_tokens", "completion_tokens", "training_tokens", "amount_micros",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SpendKey:
    """Who spent on one request and how much: its key, adapter, base model and cost."""

    key_id: UUID | None
    adapter_id: UUID | None
    base_model: str
    amount_micros: int
    kind: str = "inference"  # "training": a fine-tune's tokens; "eval": an eval run's


@dataclass(frozen=True, slots=True)
class SpendRow:
    """Aggregated spend for one (tenant, day, model, key, adapter, kind), ready to upsert."""

    tenant_id: UUID
    day: datetime
    model: str
    api_key_id: UUID
    adapter_id: UUID
    base_model: str
    kind: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    training_tokens: int
    amount_micros: int


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Aggregated counters for one (tenant, version, model, minute), ready to upsert."""

    tenant_id: UUID
    adapter_version_id: UUID
    model: str
    minute: datetime
    requests: int
    prompt_tokens: int
    completion_tokens: int
    errors: int
    cut_streams: int


class UsageWriter(Protocol):
    """Adds rows to stored usage, all or nothing."""

    async def write(self, rows: Sequence[UsageRow], spend: Sequence[SpendRow] = ()) -> None:
        """Add each row's counters to the stored row with the same key (creating it)."""
        ...


class UsageRecorder:
    """In-memory usage counters with a periodic, loss-free flush to a `UsageWriter`.

    `record` is synchronous and O(1); call it from the event loop thread only (it is not
    thread-safe, and needs no lock because it never awaits).
    """

    def __init__(self, writer: UsageWriter, *, clock: Callable[[], float] = time.time) -> None:
        self._writer = writer
        self._clock = clock  # epoch seconds; injected so tests control the minute
        self._counts: dict[UsageKey, list[int]] = {}
        self._spend: dict[SpendGroup, list[int]] = {}
        self._flush_lock = asyncio.Lock()
        self._stopping = asyncio.Event()

    @property
    def pending_rows(self) -> int:
        """How many aggregated rows wait for the next flush."""
        return len(self._counts)

    def record(
        self,
        tenant_id: UUID,
        version_id: UUID | None,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        *,
        error: bool = False,
        cut: bool = False,
        spend: SpendKey | None = None,
    ) -> None:
        """Count one request; `version_id` None means it ran on a base model. With `spend`,
        its cost is counted too (a fine-tune's tokens come as `prompt_tokens`)."""
        key = (
            tenant_id,
            BASE_MODEL_VERSION if version_id is None else version_id,
            model[:MODEL_NAME_MAX],  # the column's width; a longer name must not fail a flush
            int(self._clock() // 60),
        )
        counts = self._counts.get(key)
        if counts is None:
            counts = self._counts[key] = [0, 0, 0, 0, 0]
        counts[0] += 1
        counts[1] += prompt_tokens
        counts[2] += completion_tokens
        counts[3] += error
        counts[4] += cut
        if spend is not None:
            self._count_spend(tenant_id, key[2], key[3] // (24 * 60), spend, prompt_tokens,
                              completion_tokens)  # fmt: skip

    def _count_spend(
        self, tenant_id: UUID, model: str, day: int, spend: SpendKey, prompt: int, completion: int
    ) -> None:
        group = (
            tenant_id, day, model, spend.key_id or NOBODY, spend.adapter_id or NOBODY,
            spend.base_model[:MODEL_NAME_MAX], spend.kind,
        )  # fmt: skip
        counts = self._spend.setdefault(group, [0, 0, 0, 0, 0])
        training = spend.kind == "training"
        counts[0] += 1
        counts[1] += 0 if training else prompt
        counts[2] += completion
        counts[3] += prompt if training else 0
        counts[4] += spend.amount_micros

    async def flush(self) -> int:
        """Write every pending row; return how many. On failure the counts stay pending."""
        async with self._flush_lock:
            # Swap before awaiting: requests recorded during the write go to the new dict.
            pending, self._counts = self._counts, {}
            spent, self._spend = self._spend, {}
            if not pending and not spent:
                return 0
            try:
                await self._writer.write(
                    [_to_row(key, counts) for key, counts in pending.items()],
                    [_to_spend_row(group, counts) for group, counts in spent.items()],
                )
            except BaseException:  # cancellation too: a cut-short flush must not lose counts
                self._merge(pending, self._counts)
                self._merge(spent, self._spend)
                raise
            return len(pending)

    async def run(self, interval_s: float = 5.0) -> None:
        """Flush every `interval_s` seconds until `stop()`; a failed flush is retried later."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval_s)
            if self._stopping.is_set():
                return  # stop() writes the rest
            try:
                await self.flush()
            except Exception:
                log.warning("usage flush failed; %d rows kept for the next try", self.pending_rows)

    async def stop(self) -> None:
        """End `run()` and write what is left; what cannot be written is logged as lost."""
        self._stopping.set()
        try:
            await self.flush()
        except Exception:
            log.exception("usage flush at shutdown failed; %d rows lost", self.pending_rows)

    @staticmethod
    def _merge(pending: dict[Any, list[int]], into: dict[Any, list[int]]) -> None:
        for key, counts in pending.items():
            current = into.get(key)
            if current is None:
                into[key] = counts
            else:
                into[key] = [a + b for a, b in zip(current, counts, strict=True)]


def _to_row(key: UsageKey, counts: list[int]) -> UsageRow:
    tenant_id, version_id, model, minute = key
    return UsageRow(tenant_id, version_id, model, datetime.fromtimestamp(minute * 60, UTC), *counts)


def _to_spend_row(group: SpendGroup, counts: list[int]) -> SpendRow:
    tenant_id, day, model, key_id, adapter_id, base_model, kind = group
    moment = datetime.fromtimestamp(day * 86_400, UTC)
    return SpendRow(tenant_id, moment, model, key_id, adapter_id, base_model, kind, *counts)


def spend_upsert(dialect: str, rows: Sequence[SpendRow]) -> Insert:
    """One INSERT ... ON CONFLICT DO UPDATE adding `rows` to stored spend."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    now = datetime.now(UTC)
    stmt = insert(Spend).values(
        [{**asdict(row), "created_at": now, "updated_at": now} for row in rows]
    )
    table = Spend.__table__.c
    updates = {name: table[name] + stmt.excluded[name] for name in SPEND_COUNTERS}
    return stmt.on_conflict_do_update(
        index_elements=["tenant_id", "day", "model", "api_key_id", "adapter_id", "kind"],
        set_={**updates, "updated_at": stmt.excluded.updated_at},
    )


def upsert_statement(dialect: str, rows: Sequence[UsageRow]) -> Insert:
    """One INSERT ... ON CONFLICT DO UPDATE adding `rows` to stored usage (PostgreSQL, SQLite)."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    now = datetime.now(UTC)
    stmt = insert(Usage).values(
        [{**asdict(row), "created_at": now, "updated_at": now} for row in rows]
    )
    table = Usage.__table__.c
    updates = {name: table[name] + stmt.excluded[name] for name in COUNTERS}
    return stmt.on_conflict_do_update(
        index_elements=["tenant_id", "minute", "model", "adapter_version_id"],
        set_={**updates, "updated_at": stmt.excluded.updated_at},
    )


class SqlUsageWriter:
    """Upserts usage rows through its own sessions, in one transaction per write."""

    def __init__(
        self, session_maker: async_sessionmaker[AsyncSession], *, batch_rows: int = 500
    ) -> None:
        self._session_maker = session_maker
        self._batch_rows = batch_rows  # keeps each statement far below asyncpg's 32767 binds

    async def write(self, rows: Sequence[UsageRow], spend: Sequence[SpendRow] = ()) -> None:
        """Add `rows` and `spend` to stored usage; nothing is written unless everything is."""
        # Key order: two API replicas upserting overlapping rows lock them in the same
        # order, so PostgreSQL cannot deadlock them against each other.
        ordered = sorted(rows, key=_sort_key)
        spent = sorted(spend, key=_spend_sort_key)
        async with self._session_maker() as session, session.begin():
            dialect = session.get_bind().dialect.name
            for chunk in _chunks(ordered, self._batch_rows):
                await session.execute(upsert_statement(dialect, chunk))
            for spend_chunk in _chunks(spent, self._batch_rows):
                await session.execute(spend_upsert(dialect, spend_chunk))


def _sort_key(row: UsageRow) -> tuple[UUID, datetime, str, UUID]:
    return (row.tenant_id, row.minute, row.model, row.adapter_version_id)


def _spend_sort_key(row: SpendRow) -> tuple[UUID, datetime, str, UUID, UUID, str]:
    return (row.tenant_id, row.day, row.model, row.api_key_id, row.adapter_id, row.kind)


def _chunks(rows: Sequence[T], size: int) -> Iterable[Sequence[T]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]
