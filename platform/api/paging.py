"""Limit/offset paging with bounds, for every list endpoint."""

from __future__ import annotations

from typing import Annotated

from advanced_alchemy.filters import LimitOffset
from litestar.params import QueryParameter

MAX_PAGE_SIZE = 100


def provide_page(
    current_page: Annotated[int, QueryParameter(name="page", ge=1, le=1_000_000)] = 1,
    page_size: Annotated[int, QueryParameter(name="page_size", ge=1, le=MAX_PAGE_SIZE)] = 20,
) -> LimitOffset:
    """`?page=&page_size=` as a repository filter; out-of-range values are a 400."""
    return LimitOffset(limit=page_size, offset=page_size * (current_page - 1))
