"""Quota names, their meaning, and how a plan and a tenant's overrides combine."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loraplex.errors import InvalidInput

# name -> what it limits. Every value is a non-negative integer; a missing value means
# the plan sets no limit for it.
QUOTA_FIELDS: dict[str, str] = {
    "requests_per_minute": "inference requests per minute",
    "tokens_per_minute": "prompt + completion tokens per minute",
    "concurrent_requests": "inference requests in flight",
    "concurrent_streams": "streaming responses in flight",
    "max_tokens_per_request": "largest max_tokens a request may ask for",
    "max_choices_per_request": "largest n (choices) a request may ask for",
    "daily_tokens": "tokens per UTC day",
    "max_adapters": "adapters owned",
    "max_storage_bytes": "bytes of adapter versions stored",
    "max_rank": "largest LoRA rank of an adapter",
    "concurrent_fine_tunes": "fine-tuning jobs queued or running",
    "cold_loads_per_minute": "adapter loads from the object store per minute",
    "pinned_adapters": "adapters kept resident on engines",
    "priority": "admission priority class (higher is shed last)",
}

DEFAULT_PLANS: dict[str, dict[str, int]] = {
    "free": {
        "requests_per_minute": 60,
        "tokens_per_minute": 20_000,
        "concurrent_requests": 4,
        "concurrent_streams": 2,
        "max_tokens_per_request": 512,
        "max_choices_per_request": 4,
        "daily_tokens": 200_000,
        "max_adapters": 5,
        "max_storage_bytes": 500 * 2**20,
        "max_rank": 16,
        "concurrent_fine_tunes": 1,
        "cold_loads_per_minute": 10,
        "pinned_adapters": 0,
        "priority": 0,
    },
    "pro": {
        "requests_per_minute": 600,
        "tokens_per_minute": 200_000,
        "concurrent_requests": 32,
        "concurrent_streams": 32,
        "max_tokens_per_request": 4096,
        "max_choices_per_request": 16,
        "daily_tokens": 5_000_000,
        "max_adapters": 100,
        "max_storage_bytes": 20 * 2**30,
        "max_rank": 64,
        "concurrent_fine_tunes": 4,
        "cold_loads_per_minute": 60,
        "pinned_adapters": 2,
        "priority": 1,
    },
    "enterprise": {
        "requests_per_minute": 6000,
        "tokens_per_minute": 2_000_000,
        "concurrent_requests": 256,
        "concurrent_streams": 256,
        "max_tokens_per_request": 8192,
        "max_choices_per_request": 128,
        "daily_tokens": 100_000_000,
        "max_adapters": 1000,
        "max_storage_bytes": 200 * 2**30,
        "max_rank": 128,
        "concurrent_fine_tunes": 16,
        "cold_loads_per_minute": 600,
        "pinned_adapters": 16,
        "priority": 2,
    },
}


def check_limits(limits: Mapping[str, Any], *, param: str = "limits") -> dict[str, int]:
    """Refuse unknown quota names and values that are not non-negative integers."""
    checked: dict[str, int] = {}
    for name, value in limits.items():
        if name not in QUOTA_FIELDS:
            raise InvalidInput(f"unknown quota '{name}'", param=f"{param}.{name}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInput(
                f"quota '{name}' must be a non-negative integer", param=f"{param}.{name}"
            )
        checked[name] = value
    return checked


def effective_limits(
    plan: Mapping[str, int], overrides: Mapping[str, int] | None
) -> dict[str, int]:
    """The limits in force for a tenant: the plan's, with overrides taking precedence."""
    return {**plan, **(overrides or {})}
