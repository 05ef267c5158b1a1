"""Paging of the console's and admin's listings: one way to read `?page=`, one `Paging`.

A page past the last shows the last (a stale link or a typed number still lands on rows);
a page that is not a whole number from 1 is a 400 naming `page`. The pager under a listing
is the macro in templates/_pager.html.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

from litestar.params import QueryParameter

from loraplex.errors import InvalidInput

# The raw `?page=` of a listing, read by `page_number`; not named `page` in handlers because
# the app already has a dependency of that name (the API's paging).
PageAsked = Annotated[str, QueryParameter(name="page")]
MAX_PAGE = 10**9  # past any listing's end; a longer number is read as this, then clamped


def page_number(raw: str) -> int:
    """A page number from the query string (empty: the first); 400 unless a whole number ≥ 1.

    Only ASCII digits count: "²".isdigit() is true but int() refuses it. Numbers of any
    length are read (capped at MAX_PAGE), never handed whole to int(), which refuses more
    than 4,300 digits.
    """
    raw = raw.strip()
    if not raw:
        return 1
    digits = raw.lstrip("0")
    if not (raw.isascii() and raw.isdigit()) or not digits:
        raise InvalidInput(f"page must be a whole number from 1, not '{raw[:20]}'", param="page")
    return MAX_PAGE if len(digits) > len(str(MAX_PAGE)) else min(int(digits), MAX_PAGE)


@dataclass(frozen=True)
class Paging:
    """Which page of a listing is shown, of how many."""

    page: int  # from 1, at most `pages`
    per_page: int
    total: int  # rows matching, on every page

    @classmethod
    def of(cls, asked: int, per_page: int, total: int) -> Paging:
        """Page `asked` of `total` rows, a page past the end read as the last."""
        pages = max(1, math.ceil(total / per_page))
        return cls(min(max(asked, 1), pages), per_page, total)

    @property
    def pages(self) -> int:
        """How many pages the matching rows fill (an empty listing is one empty page)."""
        return max(1, math.ceil(self.total / self.per_page))

    @property
    def offset(self) -> int:
        """Rows before this page."""
        return (self.page - 1) * self.per_page

    @property
    def has_previous(self) -> bool:
        """Whether a page comes before this one."""
        return self.page > 1

    @property
    def has_next(self) -> bool:
        """Whether a page comes after this one."""
        return self.page < self.pages
