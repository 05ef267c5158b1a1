"""The refusals admission raises, each mapped to HTTP by `loraplex.errors` like any other."""

from __future__ import annotations

from loraplex.errors import LoraplexError


class RateLimited(LoraplexError):
    """A per-minute limit (429 `rate_limit_exceeded`) or the daily tokens (`insufficient_quota`)."""

    status_code = 429
    code = "rate_limit_exceeded"

    def __init__(self, code: str, message: str, headers: dict[str, str]):
        super().__init__(message, headers=headers)
        self.code = code  # per instance: the same class answers both OpenAI codes


class BudgetExceeded(RateLimited):
    """A money budget would be passed (429 `budget_exceeded`, as LiteLLM answers, which
    OpenAI clients retry only after Retry-After: the reset of the budget's period)."""

    def __init__(self, message: str, headers: dict[str, str]):
        super().__init__("budget_exceeded", message, headers)


class Overloaded(LoraplexError):
    """Shed under overload so admitted requests keep their TTFT (503 with Retry-After)."""

    status_code = 503
    code = "overloaded"

    def __init__(
        self,
        retry_after: str,
        headers: dict[str, str] | None = None,
        *,
        reason: str = "overload",
    ):
        merged = {**(headers or {}), "Retry-After": retry_after}
        super().__init__(
            "The service is overloaded; retry after the time in Retry-After", headers=merged
        )
        self.retry_after = retry_after
        self.reason = reason  # for the metrics (`REJECTION_REASONS`), never the client


class LimiterUnavailable(LoraplexError):
    """Redis did not answer and `fail_mode` is "closed" (503 `rate_limiter_unavailable`)."""

    status_code = 503
    code = "rate_limiter_unavailable"

    def __init__(self, detail: str = "rate limiter unavailable", retry_after: str = "1"):
        super().__init__(detail, headers={"Retry-After": retry_after})
