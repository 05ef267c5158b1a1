"""Reading `?page=` and paging a listing: odd input is a 400 naming `page`, never a 500, and a
page past the end is the last page."""

from __future__ import annotations

import pytest

from loraplex.errors import InvalidInput
from loraplex.web.paging import MAX_PAGE, Paging, page_number


@pytest.mark.parametrize(("raw", "page"), [("", 1), (" 3 ", 3), ("007", 7)])
def test_a_whole_number_from_one_is_that_page(raw: str, page: int) -> None:
    assert page_number(raw) == page


@pytest.mark.parametrize("raw", ["0", "-1", "²", "٣", "1.5", "two", "00"])
def test_anything_else_is_refused_naming_the_page(raw: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        page_number(raw)
    assert refused.value.param == "page"


@pytest.mark.parametrize("raw", ["99999999999999999999", "9" * 5000])
def test_an_enormous_number_is_read_as_the_largest_page(raw: str) -> None:
    assert page_number(raw) == MAX_PAGE


def test_a_page_past_the_end_is_the_last_page() -> None:
    paging = Paging.of(MAX_PAGE, per_page=25, total=51)
    assert (paging.page, paging.pages, paging.offset) == (3, 3, 50)
    assert paging.has_previous and not paging.has_next


def test_an_empty_listing_is_one_empty_page() -> None:
    paging = Paging.of(4, per_page=25, total=0)
    assert (paging.page, paging.pages, paging.offset) == (1, 1, 0)
