"""The Redis side of admission: one script call per admit, settle and renew.

Every API replica runs the same scripts against the same keys, so the limits hold across
replicas. The caller hands in `now`; replicas must keep their clocks in sync (NTP), and a
few milliseconds of skew shift a refill by as little.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis

from loraplex.control.budgets.money import BudgetLine, period_label, period_reset
from loraplex.gateway.admission import scripts
from loraplex.gateway.admission.policy import DAY_S, BucketState
from loraplex.gateway.admission.ticket import Ticket

NO_LIMIT = -1  # how the scripts are told a limit is not set


@dataclass(frozen=True)
class Outcome:
    """What the admit script decided, and the state behind it."""

    admitted: bool
    reason: str  # "" when admitted, else the QUOTA_FIELDS name that refused
    requests: BucketState | None
    tokens: BucketState | None
    daily_used: int
    requests_held: int
    streams_held: int


class Keys:
    """Redis key names for one tenant; all share the tenant's cluster hash tag."""

    def __init__(self, prefix: str, tenant_id: str):
        self.base = f"{prefix}{{{tenant_id}}}"

    @property
    def requests(self) -> str:
        """Requests-per-minute bucket."""
        return f"{self.base}:rpm"

    @property
    def tokens(self) -> str:
        """Tokens-per-minute bucket."""
        return f"{self.base}:tpm"

    def daily(self, day: int) -> str:
        """Tokens used on UTC day `day`."""
        return f"{self.base}:day:{day}"

    @property
    def request_leases(self) -> str:
        """Sorted set of in-flight requests, scored by lease expiry."""
        return f"{self.base}:leases:requests"

    @property
    def stream_leases(self) -> str:
        """Sorted set of in-flight streams, scored by lease expiry."""
        return f"{self.base}:leases:streams"

    def spend(self, budget_id: str, period_label: str) -> str:
        """Micro-units spent (and reserved) against one budget in one period."""
        return f"{self.base}:spend:{budget_id}:{period_label}"

    def spend_alerted(self, budget_id: str, period_label: str) -> str:
        """Set once the budget's soft alert fired in the period."""
        return f"{self.base}:spend-alerted:{budget_id}:{period_label}"

    def job_spend(self, job_id: str) -> str:
        """A fine-tuning job's hold (a hash), kept until the job ends and is settled."""
        return f"{self.base}:job-spend:{job_id}"


@dataclass(frozen=True)
class SpendOutcome:
    """What the spend script decided: admitted, or which budget refused at what spend."""

    admitted: bool
    refused_by: int | None  # index into the lines asked about
    spent: int  # micro-units spent in the refusing budget before this request
    crossed: tuple[int, ...]  # indexes of budgets whose alert this reservation set off


def _limit(limits: Mapping[str, int], name: str) -> int:
    value = limits.get(name)
    return NO_LIMIT if value is None else int(value)


class RedisLimiter:
    """Runs the admission scripts; knows keys and wire formats, decides nothing itself."""

    def __init__(self, client: Redis, *, prefix: str, window_s: float, lease_s: float):
        self.client, self.prefix, self.window_s, self.lease_s = client, prefix, window_s, lease_s
        self._admit = client.register_script(scripts.ADMIT)
        self._settle = client.register_script(scripts.SETTLE)
        self._renew = client.register_script(scripts.RENEW)
        self._spend_reserve = client.register_script(scripts.SPEND_RESERVE)
        self._spend_settle = client.register_script(scripts.SPEND_SETTLE)
        self._job_spend_settle = client.register_script(scripts.JOB_SPEND_SETTLE)

    async def admit(
        self,
        tenant_id: str,
        limits: Mapping[str, int],
        *,
        request_id: str,
        stream: bool,
        cost: int,
        now: float,
        charge: bool = True,
    ) -> Outcome:
        """Check and charge every limit at once; nothing is charged on a refusal, nor
        without `charge` (the answer is then only whether the request would fit)."""
        keys = Keys(self.prefix, tenant_id)
        day = int(now // DAY_S)
        rpm = _limit(limits, "requests_per_minute")
        tpm = _limit(limits, "tokens_per_minute")
        argv: list[Any] = [
            repr(now),
            repr(self.window_s),
            rpm,
            tpm,
            _limit(limits, "daily_tokens"),
            _limit(limits, "concurrent_requests"),
            _limit(limits, "concurrent_streams"),
            cost,
            request_id,
            repr(now + self.lease_s),
            1 if stream else 0,
            2 * DAY_S,  # outlives its day, so a late settle still finds it
            1 if charge else 0,
        ]
        key_list = [
            keys.requests,
            keys.tokens,
            keys.daily(day),
            keys.request_leases,
            keys.stream_leases,
        ]
        raw = await self._admit(keys=key_list, args=argv)
        admitted, reason, req_level, tok_level, used, n_req, n_streams = raw
        return Outcome(
            admitted=bool(int(admitted)),
            reason=_text(reason),
            requests=self._bucket(rpm, req_level),
            tokens=self._bucket(tpm, tok_level),
            daily_used=int(float(used)),
            requests_held=int(n_req),
            streams_held=int(n_streams),
        )

    def lease_keys(
        self, tenant_id: str, limits: Mapping[str, int], stream: bool
    ) -> tuple[str, ...]:
        """The lease sets an admitted request took a slot in."""
        keys = Keys(self.prefix, tenant_id)
        held = []
        if "concurrent_requests" in limits:
            held.append(keys.request_leases)
        if stream and "concurrent_streams" in limits:
            held.append(keys.stream_leases)
        return tuple(held)

    async def settle(self, ticket: Ticket, actual_tokens: int, now: float) -> float:
        """Free the ticket's slots and give back (or take) the difference to its reservation."""
        keys = Keys(self.prefix, ticket.tenant_id)
        tpm = NO_LIMIT if ticket.tokens_per_minute is None else ticket.tokens_per_minute
        raw = await self._settle(
            keys=[keys.tokens, keys.daily(ticket.day), keys.request_leases, keys.stream_leases],
            args=[
                repr(now),
                repr(self.window_s),
                tpm,
                ticket.reserved_tokens - actual_tokens,
                ticket.request_id,
            ],
        )
        return float(raw)

    async def renew(self, ticket: Ticket, now: float) -> int:
        """Push the ticket's leases out by `lease_s`; returns how many were still held."""
        if not ticket.lease_keys:
            return 0
        ttl = math.ceil(self.lease_s) + 1
        args = [repr(now + self.lease_s), ttl, ticket.request_id]
        return int(await self._renew(keys=list(ticket.lease_keys), args=args))

    async def reserve_spend(
        self, tenant_id: str, lines: Sequence[BudgetLine], amount: int, now: float
    ) -> tuple[SpendOutcome, tuple[str, ...]]:
        """Charge `amount` micro-units to every budget in `lines`, or to none of them;
        returns the outcome and the counters charged."""
        keys = Keys(self.prefix, tenant_id)
        moment = datetime.fromtimestamp(now, UTC)
        counters, flags, argv = [], [], [amount]
        for line in lines:
            label = period_label(line.period, moment)
            counters.append(keys.spend(line.id, label))
            flags.append(keys.spend_alerted(line.id, label))
            # Outlives its period by a day, so a late settle still finds it.
            ttl = math.ceil((period_reset(line.period, moment) - moment).total_seconds())
            argv += [line.amount, line.alert_at(), ttl + DAY_S]
        raw = await self._spend_reserve(keys=[*counters, *flags], args=argv)
        admitted, refusing, spent = int(raw[0]), int(raw[1]), int(float(_text(raw[2])))
        crossed = tuple(i for i, flag in enumerate(raw[3:]) if int(flag))
        outcome = SpendOutcome(bool(admitted), refusing - 1 if refusing else None, spent, crossed)
        return outcome, tuple(counters)

    async def settle_spend(self, counters: Sequence[str], give_back: int) -> None:
        """Give back (or take, when negative) micro-units on the counters a reservation charged."""
        if counters and give_back:
            await self._spend_settle(keys=list(counters), args=[give_back])

    async def keep_job_spend(
        self, tenant_id: str, job_id: str, fields: Mapping[str, str], ttl_s: int
    ) -> None:
        """Keep a job's hold (`fields`) until it is settled, or for `ttl_s` at most."""
        key = Keys(self.prefix, tenant_id).job_spend(job_id)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=dict(fields))
            pipe.expire(key, ttl_s)
            await pipe.execute()

    async def kept_job_spend(self, tenant_id: str, job_id: str) -> dict[str, str]:
        """A job's kept hold; empty when settled already or never kept."""
        raw = await self.client.hgetall(Keys(self.prefix, tenant_id).job_spend(job_id))
        return {_text(k): _text(v) for k, v in raw.items()}

    async def settle_job_spend(
        self, tenant_id: str, job_id: str, counters: Sequence[str], give_back: int
    ) -> bool:
        """Give back `give_back` micro-units on `counters` and drop the job's hold, unless
        it was settled already; True when this call settled it."""
        key = Keys(self.prefix, tenant_id).job_spend(job_id)
        return bool(int(await self._job_spend_settle(keys=[key, *counters], args=[give_back])))

    async def spent(self, tenant_id: str, lines: Sequence[BudgetLine], now: float) -> list[int]:
        """Micro-units spent and reserved against each budget in its current period."""
        keys = Keys(self.prefix, tenant_id)
        moment = datetime.fromtimestamp(now, UTC)
        names = [keys.spend(line.id, period_label(line.period, moment)) for line in lines]
        values = await self.client.mget(names) if names else []
        return [int(v) if v is not None else 0 for v in values]

    def _bucket(self, limit: int, level: Any) -> BucketState | None:
        if limit == NO_LIMIT:
            return None
        return BucketState(limit, float(level), self.window_s)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
