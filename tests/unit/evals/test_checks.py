"""Tenant input to evals is bounded and named when refused."""

from __future__ import annotations

import msgspec
import pytest

from loraplex.errors import InvalidInput
from loraplex.evals.checks import MAX_ITEM_DEPTH, check_items, check_schema, parse_lines
from loraplex.evals.schemas import MAX_CRITERIA, EvalCreate
from loraplex.evals.templates import render

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def test_an_item_not_matching_the_schema_is_refused_by_its_index() -> None:
    with pytest.raises(InvalidInput, match=r"content\[1\] does not match"):
        check_items([{"q": "a"}, {"q": 3}], check_schema(SCHEMA, "s"), "content")


def test_a_deeply_nested_item_is_refused() -> None:
    item: dict = {"q": "a"}
    for _ in range(MAX_ITEM_DEPTH + 5):
        item = {"q": "a", "x": item}
    with pytest.raises(InvalidInput, match="nests more than"):
        check_items([item], check_schema({"type": "object"}, "s"), "content")


def test_an_invalid_schema_is_a_400_naming_it() -> None:
    with pytest.raises(InvalidInput, match="item_schema is not a valid JSON Schema"):
        check_schema({"type": "no-such-type"}, "item_schema")


def test_too_many_criteria_do_not_decode() -> None:
    criterion = {
        "type": "string_check",
        "name": "c",
        "input": "a",
        "reference": "b",
        "operation": "eq",
    }
    body = {
        "data_source_config": {"type": "custom", "item_schema": SCHEMA},
        "testing_criteria": [criterion] * (MAX_CRITERIA + 1),
    }
    with pytest.raises(msgspec.ValidationError, match="testing_criteria"):
        msgspec.convert(body, EvalCreate)


def test_a_file_line_that_is_not_an_item_object_names_its_line() -> None:
    with pytest.raises(InvalidInput, match="line 2"):
        parse_lines(iter([b'{"item": {"q": "a"}}\n', b"[1, 2]\n"]), "file")


def test_templates_fill_item_and_sample_paths() -> None:
    context = {"item": {"q": "a", "n": {"x": [1]}}, "sample": {"output_text": "out"}}
    assert render("{{item.q}}/{{ sample.output_text }}/{{item.n}}/{{item.none}}", context) == (
        'a/out/{"x": [1]}/'
    )
