"""How many uploads one API process receives at once, per tenant and in all.

An upload holds a connection, an open file and disk space for as long as its client takes
to send it; a client sending a few bytes a second holds them for hours. A tenant may hold
`per_tenant` of this process's upload places and all tenants together `total`: past that
the next upload is refused at once with 429 and Retry-After, before a byte of it is read.
Counted per process (not in Redis) because what is protected is the process's own
connections, files and disk.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

from loraplex.errors import TooManyRequests
from loraplex.observability.metrics import TenantLabeler, count_limit_refusal

RETRY_AFTER_S = 5


class TooManyUploads(TooManyRequests):
    """This tenant (or everyone) already sends as many uploads to this process as allowed."""

    code = "too_many_uploads"


class UploadSlots:
    """Places for uploads in progress: `hold(tenant)` takes one for the upload's duration."""

    def __init__(self, per_tenant: int, total: int) -> None:
        self.per_tenant, self.total = per_tenant, total
        self._held: Counter[str] = Counter()
        self._label = TenantLabeler()

    @contextlib.contextmanager
    def hold(self, tenant: str) -> Iterator[None]:
        """A place for one upload by `tenant`, or TooManyUploads."""
        if self._held[tenant] >= self.per_tenant:
            count_limit_refusal("concurrent_uploads", self._label(tenant))
            raise TooManyUploads(
                f"{self.per_tenant} uploads of yours are already being received; "
                "wait for one to finish",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        if sum(self._held.values()) >= self.total:
            count_limit_refusal("concurrent_uploads_all", self._label(tenant))
            raise TooManyUploads(
                "this server is receiving as many uploads as it can; retry shortly",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self._held[tenant] += 1
        try:
            yield
        finally:
            self._held[tenant] -= 1
            if not self._held[tenant]:
                del self._held[tenant]
