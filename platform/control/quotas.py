"""Quota names, their meaning, and how a plan and a tenant's overrides combine."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
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
    "max_storage_bytes": "bytes stored: adapter versions, training files, checkpoints",
    "max_rank": "largest LoRA rank of an adapter or a fine-tuning job",
    "concurrent_fine_tunes": "fine-tuning jobs queued or running",
    "max_fine_tune_steps": "most optimizer steps of one fine-tuning job (epochs x rows / batch)",
    "min_checkpoint_every": "fewest steps between a fine-tuning job's checkpoints",
    "cold_loads_per_minute": "adapter loads from the object store per minute",
    "pinned_adapters": "adapters kept resident on engines",
    "priority": "admission priority class (higher is shed last)",
    "price_discount_percent": "percent taken off every price (0-100)",
}
# Quotas with an upper bound beside being non-negative.
QUOTA_MAXIMA: dict[str, int] = {"price_discount_percent": 100}

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
        "max_fine_tune_steps": 2_000,
        "min_checkpoint_every": 20,
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
        "max_fine_tune_steps": 50_000,
        "min_checkpoint_every": 10,
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
        "max_fine_tune_steps": 500_000,
        "min_checkpoint_every": 5,
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
        if value > QUOTA_MAXIMA.get(name, value):
            raise InvalidInput(
                f"quota '{name}' is at most {QUOTA_MAXIMA[name]}", param=f"{param}.{name}"
            )
        checked[name] = value
    return checked


def effective_limits(
    plan: Mapping[str, int], overrides: Mapping[str, int] | None
) -> dict[str, int]:
    """The limits in force for a tenant: the plan's, with overrides taking precedence."""
    return {**plan, **(overrides or {})}


@dataclass(frozen=True, slots=True)
class Quotas(Mapping[str, int]):
    """A tenant's limits in force, typed: one attribute per quota, None where the plan sets
    no limit. It is also the mapping of the quotas that are set (name -> value), which is
    how the Redis limiter reads them by name."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent_requests: int | None = None
    concurrent_streams: int | None = None
    max_tokens_per_request: int | None = None
    max_choices_per_request: int | None = None
    daily_tokens: int | None = None
    max_adapters: int | None = None
    max_storage_bytes: int | None = None
    max_rank: int | None = None
    concurrent_fine_tunes: int | None = None
    max_fine_tune_steps: int | None = None
    min_checkpoint_every: int | None = None
    cold_loads_per_minute: int | None = None
    pinned_adapters: int | None = None
    priority: int | None = None
    price_discount_percent: int | None = None

    @classmethod
    def of(cls, limits: Mapping[str, int]) -> Quotas:
        """The quotas of a limits mapping (plan merged with overrides); other names ignored."""
        return cls(**{name: int(v) for name, v in limits.items() if name in QUOTA_FIELDS})

    def __getitem__(self, name: str) -> int:
        value = getattr(self, name, None) if name in QUOTA_FIELDS else None
        if value is None:
            raise KeyError(name)
        return int(value)

    def __iter__(self) -> Iterator[str]:
        return (f.name for f in fields(self) if getattr(self, f.name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)
