"""Why fetching an adapter from its source failed; each message is safe to show the tenant."""

from __future__ import annotations

import enum


class FetchProblem(enum.StrEnum):
    """The short code an import job fails with when its source could not be fetched."""

    ADDRESS_REFUSED = "address_refused"
    SOURCE_DENIED = "source_denied"  # the source refused the credentials (401/403)
    SOURCE_NOT_FOUND = "source_not_found"
    SOURCE_FAILED = "source_failed"  # any other answer, or no answer at all
    TOO_LARGE = "too_large"
    TIMED_OUT = "timed_out"
    BAD_SOURCE = "bad_source"  # the source is not shaped like an adapter (missing files)


class FetchError(Exception):
    """A source that could not be fetched. `message` never holds a credential, a query
    string or an address the tenant did not give."""

    def __init__(self, problem: FetchProblem, message: str) -> None:
        super().__init__(f"{problem}: {message}")
        self.problem = problem
        self.message = message
