"""What an admitted request holds until it ends: its reservation, leases and headers."""

from __future__ import annotations

from dataclasses import dataclass, field

from loraplex.control.budgets.money import BudgetLine, Price, cost
from loraplex.gateway.admission.policy import BucketState, ratelimit_headers


@dataclass
class SpendHold:
    """Money an admitted request reserved from its budgets; settled once, at its real cost."""

    tenant_id: str
    counters: tuple[str, ...]  # the Redis spend counters the reservation charged
    price: Price  # the price in force at admission, used again to settle and to bill
    reserved: int  # micro-units: the cost of the reservation's tokens
    crossed: tuple[BudgetLine, ...] = field(default=())  # budgets whose alert it set off
    actual: int | None = None  # micro-units, set when the request ends
    settled: bool = False

    def use(self, *, prompt: int = 0, completion: int = 0, training: int = 0) -> int:
        """Record the tokens the request really used; returns their cost."""
        self.actual = cost(self.price, prompt=prompt, completion=completion, training=training)
        return self.actual


@dataclass
class Ticket:
    """An admitted request. Release it (or leave `TenantQuotas.hold`) exactly once."""

    tenant_id: str
    request_id: str
    stream: bool
    reserved_tokens: int  # prompt + max_tokens, charged at admission
    tokens_per_minute: int | None  # the limit the reservation was charged against
    day: int  # UTC day whose daily counter was charged
    lease_keys: tuple[str, ...]  # the concurrency sets holding this request's slots
    requests: BucketState | None
    tokens: BucketState | None
    degraded: bool = False  # admitted while Redis was down (fail open): nothing was charged
    actual_tokens: int | None = None  # set by the caller before leaving `hold`
    spend: SpendHold | None = None  # its money reservation, settled on release
    released: bool = False

    @property
    def headers(self) -> dict[str, str]:
        """`x-ratelimit-*` headers for the success response."""
        return ratelimit_headers(self.requests, self.tokens)
