"""What an admitted request holds until it ends: its reservation, leases and headers."""

from __future__ import annotations

from dataclasses import dataclass

from loraplex.gateway.admission.policy import BucketState, ratelimit_headers


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
    released: bool = False

    @property
    def headers(self) -> dict[str, str]:
        """`x-ratelimit-*` headers for the success response."""
        return ratelimit_headers(self.requests, self.tokens)
