"""`TenantQuotas`, the one object the gateway calls: admit, hold while running, release.

Order of checks: overload first (in-process, no Redis — a shed request spends no quota and
an overloaded gateway sends no extra traffic to Redis), then one atomic Redis call for every
tenant limit and concurrency slot. A request about to be shed for load is first asked, in
Redis and without charging anything, whether it is within its tenant's quota: a tenant
over its quota is told so (429 with its own Retry-After), not that the engines are busy
(503), since waiting for the engines would not help it (`refuse_if_over_quota`).

When Redis does not answer within `timeout_s`, `fail_mode` decides: "closed" (default)
refuses with 503 `rate_limiter_unavailable`; "open" admits without limits, logs, and counts
`loraplex_admission_limiter_failures{outcome="admitted"}`.

The timeout is Redis's, not the event loop's (`redis_deadline`): when the deadline comes
and the loop itself is running late (a busy process: at 64 streams on two cores its lag
reached the timeout), Redis's answer may be sitting unread in the socket, so the call gets
a fresh window instead of a refusal. A Redis that is really gone still fails, one window
later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Literal
from uuid import UUID

from prometheus_client import Counter
from redis.asyncio import Redis
from redis.exceptions import RedisError

from loraplex.connections import connect_redis
from loraplex.control.budgets.money import BudgetLine, Price, cost
from loraplex.gateway.admission import refusals
from loraplex.gateway.admission.errors import LimiterUnavailable, Overloaded, RateLimited
from loraplex.gateway.admission.leases import LeaseRenewer
from loraplex.gateway.admission.limiter import Outcome, RedisLimiter
from loraplex.gateway.admission.overload import OverloadShedder
from loraplex.gateway.admission.policy import WINDOW_S, retry_after, utc_day
from loraplex.gateway.admission.ticket import SpendHold, Ticket
from loraplex.observability.metrics import (
    ADMISSION_REJECTIONS,
    TenantLabeler,
    count_limit_refusal,
)

log = logging.getLogger("loraplex.gateway.admission")

FailMode = Literal["closed", "open"]
REDIS_ERRORS = (RedisError, OSError, TimeoutError)
FAIL_OPEN_LOG_EVERY_S = 10.0  # one warning per interval, not one per request in an outage
LOOP_LATE_S = 0.05  # a deadline check running this late means the process, not Redis, is slow
MAX_EXTENSIONS = 3  # fresh windows granted to one call for the loop's lateness

LIMITER_FAILURES = Counter(
    "loraplex_admission_limiter_failures",
    "Admissions decided without Redis, by outcome (admitted = fail open, refused = closed).",
    ["outcome"],
)


@contextlib.asynccontextmanager
async def redis_deadline(timeout_s: float) -> AsyncIterator[None]:
    """`asyncio.timeout(timeout_s)` that does not count the event loop's own lateness.

    A check is scheduled just before the deadline. When it runs more than `LOOP_LATE_S`
    late, the loop was busy (its timers and ready callbacks, Redis's reply among them, were
    all waiting), so the deadline moves to a fresh `timeout_s` from now, at most
    `MAX_EXTENSIONS` times. The check runs before the timeout's own callback, so it can move
    the deadline in time.
    """
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeout_s) as deadline:
        extensions = 0
        check: asyncio.TimerHandle | None = None

        def arm(at: float) -> None:
            nonlocal check
            check = loop.call_at(at - LOOP_LATE_S / 2, extend_if_late, at - LOOP_LATE_S / 2)

        def extend_if_late(due: float) -> None:
            nonlocal extensions
            if loop.time() - due > LOOP_LATE_S and extensions < MAX_EXTENSIONS:
                extensions += 1
                at = loop.time() + timeout_s
                deadline.reschedule(at)
                arm(at)

        arm(loop.time() + timeout_s)
        try:
            yield
        finally:
            if check is not None:
                check.cancel()


class TenantQuotas:
    """Tenant rate limits, concurrency leases and overload shedding for /v1 requests."""

    def __init__(
        self,
        redis: str | Redis,
        *,
        lease_s: float = 15.0,
        fail_mode: FailMode = "closed",
        clock: Callable[[], float] = time.time,
        window_s: float = WINDOW_S,
        timeout_s: float = 0.5,  # as `ratelimit_redis_timeout_s`: a loaded host may lag 0.1 s
        key_prefix: str = "loraplex:admission:",
        overload: OverloadShedder | None = None,
        labeler: TenantLabeler | None = None,
        reason_prefix: str = "",
    ):
        if fail_mode not in ("closed", "open"):
            raise ValueError(f"fail_mode must be 'closed' or 'open', not {fail_mode!r}")
        self._owns_client = isinstance(redis, str)
        self.client = connect_redis(redis, timeout_s) if isinstance(redis, str) else redis
        self.lease_s, self.fail_mode, self.clock, self.timeout_s = (
            lease_s,
            fail_mode,
            clock,
            timeout_s,
        )
        self.overload, self.labeler = overload, labeler or TenantLabeler()
        # Prefixed to each refusal's metric reason: "resume_" for the resume readers' leases.
        self.reason_prefix = reason_prefix
        self.limiter = RedisLimiter(
            self.client, prefix=key_prefix, window_s=window_s, lease_s=lease_s
        )
        self._last_fail_log = -FAIL_OPEN_LOG_EVERY_S

    async def admit(
        self,
        tenant_id: UUID | str,
        limits: Mapping[str, int],
        *,
        request_id: str,
        stream: bool,
        estimated_tokens: int,
        estimated_ttft_s: float | None = None,
    ) -> Ticket:
        """Admit a request or raise `Overloaded`, `RateLimited` or `LimiterUnavailable`."""
        tenant = str(tenant_id)
        if estimated_ttft_s is not None and self.overload is not None:
            decision = self.overload.decide(estimated_ttft_s, limits.get("priority", 0))
            if not decision.admit:
                await self.refuse_if_over_quota(
                    tenant, limits, stream=stream, estimated_tokens=estimated_tokens
                )
                self._reject("overload", tenant)
                raise Overloaded(retry_after(decision.retry_after_s))
        refusals.refuse_if_too_large(tenant, limits, estimated_tokens, self._reject)
        now = self.clock()
        try:
            outcome = await self._ask(tenant, limits, request_id, stream, estimated_tokens, now)
        except REDIS_ERRORS as exc:
            return self._without_redis(tenant, request_id, stream, estimated_tokens, now, exc)
        refusals.set_usage_gauges(self.labeler(tenant), limits, outcome)
        if not outcome.admitted:
            raise refusals.refusal(outcome, estimated_tokens, now, self._reject, tenant)
        return self._ticket(tenant, limits, request_id, stream, estimated_tokens, now, outcome)

    async def refuse_if_over_quota(
        self,
        tenant_id: UUID | str,
        limits: Mapping[str, int],
        *,
        stream: bool,
        estimated_tokens: int,
    ) -> None:
        """Raise the tenant's own refusal (`RateLimited`) when the request would not fit its
        quota now; charge nothing either way.

        For a request the caller is about to shed for load: its tenant learns the limit it
        hit and when to retry, rather than a 503 that invites it back as soon as the
        engines have room. Redis not answering leaves the caller's refusal standing.
        """
        tenant = str(tenant_id)
        refusals.refuse_if_too_large(tenant, limits, estimated_tokens, self._reject)
        now = self.clock()
        try:
            outcome = await self._ask(tenant, limits, "", stream, estimated_tokens, now, False)
        except REDIS_ERRORS:
            return
        if not outcome.admitted:
            raise refusals.refusal(outcome, estimated_tokens, now, self._reject, tenant)

    def over_concurrency(self, tenant_id: UUID | str, held: int) -> RateLimited:
        """The tenant's 429 for a request beyond the `held` its plan lets it run at once,
        counted like the quota's own (admission's core saw it first, in this process)."""
        return refusals.concurrency_refusal(held, self._reject, str(tenant_id))

    async def release(self, ticket: Ticket, actual_tokens: int | None = None) -> None:
        """Free the ticket's slots and settle its tokens to `actual_tokens` (once; never raises)."""
        if ticket.released:
            return
        ticket.released = True
        if ticket.degraded:
            return
        used = actual_tokens if actual_tokens is not None else ticket.actual_tokens
        try:
            async with redis_deadline(self.timeout_s):
                await self.limiter.settle(
                    ticket, ticket.reserved_tokens if used is None else used, self.clock()
                )
        except REDIS_ERRORS as exc:
            # The leases expire by themselves; only the unused reservation is not given back.
            log.warning("release of %s failed: %s", ticket.request_id, exc)
        if ticket.spend is not None:
            await self.settle_spend(ticket.spend)

    async def reserve_spend(
        self,
        tenant_id: UUID | str,
        lines: Sequence[BudgetLine],
        price: Price,
        *,
        prompt: int = 0,
        completion: int = 0,
        training: int = 0,
        currency: str = "USD",
    ) -> SpendHold | None:
        """Reserve the price of the tokens from every budget in `lines` at once, or raise
        `BudgetExceeded` naming the budget that would be passed and when it resets.

        None when no budget applies, or Redis is down and `fail_mode` is "open".
        """
        tenant = str(tenant_id)
        amount = cost(price, prompt=prompt, completion=completion, training=training)
        if not lines:
            return SpendHold(tenant, (), price, amount)
        now = self.clock()
        try:
            async with redis_deadline(self.timeout_s):
                outcome, counters = await self.limiter.reserve_spend(tenant, lines, amount, now)
        except REDIS_ERRORS as exc:
            self._limiter_down(exc, tenant)
            return None
        if outcome.refused_by is not None:
            self._reject("budget", tenant)
            line = lines[outcome.refused_by]
            raise refusals.budget_refusal(line, outcome.spent, amount, now, currency)
        crossed = tuple(lines[i] for i in outcome.crossed)
        return SpendHold(tenant, counters, price, amount, crossed)

    async def settle_spend(self, hold: SpendHold) -> None:
        """Give back what the request did not spend (its whole reservation when it never
        reported a cost); once, never raises."""
        if hold.settled:
            return
        hold.settled = True
        actual = hold.reserved if hold.actual is None else hold.actual
        try:
            async with redis_deadline(self.timeout_s):
                await self.limiter.settle_spend(hold.counters, hold.reserved - actual)
        except REDIS_ERRORS as exc:
            # The period's counter keeps the whole reservation: it errs toward refusing.
            log.warning("settling the spend of a request failed: %s", exc)

    async def spent(self, tenant_id: UUID | str, lines: Sequence[BudgetLine]) -> list[int]:
        """Micro-units spent or reserved against each budget now (for reports and banners)."""
        async with redis_deadline(self.timeout_s):
            return await self.limiter.spent(str(tenant_id), lines, self.clock())

    @contextlib.asynccontextmanager
    async def hold(self, ticket: Ticket) -> AsyncIterator[Ticket]:
        """Renew the ticket's leases while the body runs; release on exit.

        Set `ticket.actual_tokens` inside the block to give back what was not used; left
        unset, the whole reservation counts as used.
        """
        renewer = LeaseRenewer(ticket, self._renew, self.lease_s)
        renewer.start()
        try:
            yield ticket
        finally:
            await renewer.stop()
            await self.release(ticket)

    async def aclose(self) -> None:
        """Close the Redis client if this object made it."""
        if self._owns_client:
            await self.client.aclose()

    async def _ask(
        self,
        tenant: str,
        limits: Mapping[str, int],
        request_id: str,
        stream: bool,
        cost: int,
        now: float,
        charge: bool = True,
    ) -> Outcome:
        """One admission script call within Redis's deadline; raises `REDIS_ERRORS`."""
        async with redis_deadline(self.timeout_s):
            return await self.limiter.admit(
                tenant,
                limits,
                request_id=request_id,
                stream=stream,
                cost=cost,
                now=now,
                charge=charge,
            )

    async def _renew(self, ticket: Ticket) -> int:
        async with redis_deadline(self.timeout_s):
            return await self.limiter.renew(ticket, self.clock())

    def _reject(self, reason: str, tenant: str) -> None:
        label, reason = self.labeler(tenant), self.reason_prefix + reason
        ADMISSION_REJECTIONS.labels(reason, label).inc()
        count_limit_refusal(reason, label)

    def _without_redis(
        self, tenant: str, request_id: str, stream: bool, cost: int, now: float, exc: Exception
    ) -> Ticket:
        self._limiter_down(exc, tenant)
        return Ticket(
            tenant_id=tenant,
            request_id=request_id,
            stream=stream,
            reserved_tokens=cost,
            tokens_per_minute=None,
            day=utc_day(now),
            lease_keys=(),
            requests=None,
            tokens=None,
            degraded=True,
        )

    def _limiter_down(self, exc: Exception, tenant: str) -> None:
        """Fail closed (raise) or open (log, count, carry on), as configured.

        The client's message names no exception: what went wrong goes to the log.
        """
        now = time.monotonic()
        if now - self._last_fail_log >= FAIL_OPEN_LOG_EVERY_S:
            self._last_fail_log = now
            what = (
                "refusing (fail closed)"
                if self.fail_mode == "closed"
                else ("admitting without limits (fail open)")
            )
            log.warning("Redis unreachable (%r); %s", exc, what)
        if self.fail_mode == "closed":
            LIMITER_FAILURES.labels("refused").inc()
            self._reject("limiter_unavailable", tenant)
            raise LimiterUnavailable("rate limiter unavailable; retry shortly") from exc
        LIMITER_FAILURES.labels("admitted").inc()

    def _ticket(
        self,
        tenant: str,
        limits: Mapping[str, int],
        request_id: str,
        stream: bool,
        cost: int,
        now: float,
        outcome: Outcome,
    ) -> Ticket:
        return Ticket(
            tenant_id=tenant,
            request_id=request_id,
            stream=stream,
            reserved_tokens=cost,
            tokens_per_minute=limits.get("tokens_per_minute"),
            day=utc_day(now),
            lease_keys=self.limiter.lease_keys(tenant, limits, stream),
            requests=outcome.requests,
            tokens=outcome.tokens,
        )
