"""A tenant a suite made through the API, and its key."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tenant:
    """A tenant and one key of its (the suites make it with admin and inference scopes)."""

    id: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        """Its bearer header."""
        return {"Authorization": f"Bearer {self.key}"}
