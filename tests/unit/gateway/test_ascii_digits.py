"""Numbers from clients are ASCII digits: "²" and "٣" are `isdigit()` but `int()` refuses
the first, so each answered 500 before; now a 400 (or a plain miss) that names the field."""

from __future__ import annotations

import pytest

from loraplex.errors import InvalidInput
from loraplex.gateway.http import last_event_id
from loraplex.gateway.resolve import VERSION_SELECTOR
from loraplex.serving.simulator.seeds import parse_seeds


@pytest.mark.parametrize("raw", ["²", "٣", "1²", "9" * 5000, "-1", ""])
def test_a_last_event_id_that_is_not_ascii_digits_is_a_400(raw: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        last_event_id(raw)
    assert refused.value.param == "Last-Event-ID"


def test_a_last_event_id_of_ascii_digits_is_read() -> None:
    assert last_event_id(" 41 ") == 41
    assert last_event_id(None) is None


def test_a_version_selector_takes_ascii_digits_only() -> None:
    assert VERSION_SELECTOR.fullmatch("v12")
    assert not VERSION_SELECTOR.fullmatch("v²")
    assert not VERSION_SELECTOR.fullmatch("v" + "9" * 5000)


def test_seeds_refuse_unicode_digits_with_their_own_message() -> None:
    with pytest.raises(ValueError, match="not a seed"):
        parse_seeds("0-²")
