"""The previous gate's borrowing (gate.py here): a tenant below its fair share went in past
the cap while another held more than its own. The core never admits past its places."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def may_borrow(tenant: K, running: Mapping[K, int], shares: Mapping[K, float]) -> bool:
    """Whether `tenant` may start one more request past the cap: one more still fits in its
    share, and some other tenant holds at least one whole place more than its own.

    Whole places on both sides: with more tenants than places every share is below one,
    and nobody borrows, so the cap still holds.
    """
    if running.get(tenant, 0) + 1 > shares.get(tenant, 0.0):
        return False
    return any(n >= shares.get(k, 0.0) + 1 for k, n in running.items() if k != tenant)
