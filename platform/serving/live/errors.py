"""The refusals live placement raises; `loraplex.errors` maps them to HTTP like any other."""

from __future__ import annotations

import math

from loraplex.errors import LoraplexError


def _retry_after(seconds: float) -> dict[str, str]:
    return {"Retry-After": str(max(1, math.ceil(seconds)))}


class ColdLoadLimited(LoraplexError):
    """The tenant loads adapters faster than its plan's cold-load budget (429)."""

    status_code = 429
    code = "rate_limit_exceeded"

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(
            "This tenant is loading adapters faster than its plan's cold_loads_per_minute; "
            "retry after the time in Retry-After",
            headers=_retry_after(retry_after_s),
        )
        self.retry_after_s = retry_after_s


class PlacementDeferred(LoraplexError):
    """The request's cold load was deferred past the queue timeout (503)."""

    status_code = 503
    code = "service_unavailable"

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(
            "The adapter cannot be loaded before the queue timeout; "
            "retry after the time in Retry-After",
            headers=_retry_after(retry_after_s),
        )
        self.retry_after_s = retry_after_s
