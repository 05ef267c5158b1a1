"""Url-encoded forms are parsed without Litestar's cache and with a field cap
(`loraplex.web.forms.parse_form`): the console's and the sign-in page's forms come from
anyone, and a cache of the last 1,024 bodies held a GiB of them."""

from __future__ import annotations

import litestar._kwargs.extractors
import litestar.connection.request
import pytest

from loraplex.errors import InvalidInput
from loraplex.web.forms import MAX_FORM_FIELDS, install_form_parser, parse_form


def test_litestar_parses_forms_with_ours_once_installed() -> None:
    install_form_parser()
    for module in (litestar.connection.request, litestar._kwargs.extractors):
        assert module.parse_url_encoded_form_data is parse_form  # type: ignore[attr-defined]
    assert not hasattr(parse_form, "cache_info")


def test_a_form_parses_as_litestar_parses_it() -> None:
    parsed = parse_form(b"name=k&scopes=admin&scopes=read&email=a%40b.co")
    assert parsed == {"name": "k", "scopes": ["admin", "read"], "email": "a@b.co"}


def test_a_form_of_too_many_fields_is_refused_before_it_is_parsed() -> None:
    assert len(parse_form(b"&".join([b"f=1"] * MAX_FORM_FIELDS))["f"]) == MAX_FORM_FIELDS
    with pytest.raises(InvalidInput, match=f"at most {MAX_FORM_FIELDS}"):
        parse_form(b"&".join([b"scopes="] * 120_000))
