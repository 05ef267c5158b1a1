"""Tenant JSON Schemas over a limit are refused by name and JSON path; real ones pass."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loraplex.gateway.schema_limits import (
    MAX_COUNT,
    MAX_DEPTH,
    MAX_NUMBER,
    MAX_OPTIONAL_PROPERTIES,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_VALUES,
    SchemaTooComplex,
    check_request_schemas,
    check_schema_limits,
)
from loraplex.gateway.schema_patterns import MAX_REPEAT, pattern_problem

P = "response_format.json_schema.schema"


def refused(schema: Any) -> SchemaTooComplex:
    with pytest.raises(SchemaTooComplex) as caught:
        check_schema_limits(schema, P)
    return caught.value


def nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


REAL_SCHEMAS = [
    # OpenAI's structured-outputs examples and the shapes agent tools send.
    {
        "type": "object",
        "properties": {
            "steps": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"explanation": {"type": "string"}, "output": {"type": "string"}},
                    "required": ["explanation", "output"],
                    "additionalProperties": False,
                },
            },
            "final_answer": {"type": "string"},
        },
        "required": ["steps", "final_answer"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "path": {"type": "string", "pattern": r"^[a-z0-9_\-/]+(\.[a-z0-9]+)*$"},
            "content": {"type": "string", "maxLength": 100_000},
            "phone": {"type": "string", "pattern": r"^(\+\d{1,3})?\d{10}$"},
            "mode": {"enum": ["overwrite", "append"]},
            "retries": {"type": "integer", "minimum": 0, "maximum": 10},
        },
        "required": ["path", "content"],
    },
    {  # a recursive tree, as OpenAI documents with `#`
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "value": {"type": "number"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
            }
        },
        "anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}],
    },
    nested(MAX_DEPTH // 2 - 1),
]


@pytest.mark.parametrize("schema", REAL_SCHEMAS)
def test_schemas_real_requests_send_pass(schema: dict[str, Any]) -> None:
    assert check_schema_limits(schema, P) > 0


def test_a_schema_over_its_byte_limit_is_refused_before_anything_reads_it() -> None:
    error = refused({"description": "x" * MAX_SCHEMA_BYTES})
    assert error.limit == "schema_bytes" and error.param == P


def test_nesting_past_the_depth_limit_names_the_deepest_path() -> None:
    error = refused(nested(MAX_DEPTH))
    assert error.limit == "schema_depth"
    assert error.param.startswith(P + ".items.items")


def test_depth_counts_data_too_and_never_recurses_on_the_python_stack() -> None:
    value: Any = 1
    for _ in range(5_000):
        value = [value]
    assert refused({"enum": [value]}).limit == "schema_depth"


@pytest.mark.parametrize("keyword", ["minLength", "maxLength", "minItems", "maxItems"])
def test_counts_over_the_limit_are_refused_at_their_keyword(keyword: str) -> None:
    error = refused({"type": "object", "properties": {"a": {keyword: MAX_COUNT + 1}}})
    assert error.param == f"{P}.properties.a.{keyword}" and error.limit == "schema_count"


@pytest.mark.parametrize("number", [MAX_NUMBER + 1, -(10**4000), 1e300])
def test_numbers_past_a_doubles_exact_range_are_refused(number: float) -> None:
    error = refused({"type": "integer", "maximum": number})
    assert error.param == f"{P}.maximum" and error.limit == "schema_number"
    assert len(error.detail) < 200  # a 4,000-digit number is not echoed whole


def test_optional_properties_are_bounded_per_object_required_ones_are_not() -> None:
    names = [f"p{i}" for i in range(MAX_OPTIONAL_PROPERTIES + 1)]
    properties = {name: {"type": "string"} for name in names}
    assert refused({"properties": properties}).limit == "schema_optional_properties"
    check_schema_limits({"properties": properties, "required": names}, P)


def test_properties_enum_values_and_branches_are_counted_across_the_schema() -> None:
    halves = [{"enum": list(range(600))}, {"enum": list(range(600))}]
    assert refused({"anyOf": halves}).limit == "schema_enum"
    branches = [{"anyOf": [{"const": i} for i in range(600)]} for _ in range(2)]
    assert refused({"allOf": branches}).limit == "schema_branches"
    objects = [{"properties": {f"p{i}": {} for i in range(600)}, "required": []} for _ in "ab"]
    fields = [f"p{i}" for i in range(600)]
    for schema in objects:
        schema["required"] = fields
    assert refused({"anyOf": objects}).limit == "schema_properties"


def test_keywords_are_read_only_where_a_schema_stands() -> None:
    schema = {
        "type": "object",
        "properties": {"pattern": {"type": "string"}, "maxLength": {"type": "integer"}},
        "examples": [{"pattern": "(a+)+", "maxLength": 10**9}],
    }
    check_schema_limits(schema, P)


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("https://example.com/schema.json", "not a local reference"),
        ("#/$defs/missing", "names no schema"),
        ("other.json#/a", "not a local reference"),
    ],
)
def test_references_must_be_local_and_resolve(ref: str, why: str) -> None:
    error = refused({"type": "object", "properties": {"a": {"$ref": ref}}})
    assert error.param == f"{P}.properties.a.$ref" and why in error.detail


def test_a_loop_of_references_without_content_is_refused() -> None:
    schema = {
        "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
        "$ref": "#/$defs/a",
    }
    assert "loop" in refused(schema).detail


def test_pattern_properties_keys_are_patterns() -> None:
    error = refused({"patternProperties": {"^(a+)+$": {"type": "string"}}})
    assert error.limit == "schema_pattern" and ".patternProperties" in error.param


def test_the_request_wide_budget_counts_every_schema_together() -> None:
    big = {"description": "x" * 60_000}
    check_request_schemas([(f"tools[{i}].function.parameters", big) for i in range(4)])
    with pytest.raises(SchemaTooComplex) as caught:
        check_request_schemas([(f"tools[{i}].function.parameters", big) for i in range(5)])
    assert caught.value.limit == "request_schema_bytes" and caught.value.param == "tools"


def test_values_are_bounded_from_the_text_before_any_walk() -> None:
    error = refused({"type": "object", "examples": [[] for _ in range(MAX_SCHEMA_VALUES)]})
    assert error.limit == "schema_values"


def test_a_document_nested_past_the_encoders_limit_is_refused_by_depth() -> None:
    value: Any = 1
    for _ in range(50_000):
        value = [value]
    assert refused({"enum": [value]}).limit == "schema_depth"


@pytest.mark.parametrize(
    "pattern",
    [r"^\d{3}-\d{4}$", r"^[a-z0-9]+(\.[a-z0-9]+)*$", r"^(\+\d{1,3})?\d{10}$", r"[{]{2}",
     r"^[A-Z]{2}\d{6}$", r"(?:ab)+", r"^(?<year>\d{4})-\d{2}$", "a{128}", r"x{,5}"],
)  # fmt: skip
def test_patterns_real_schemas_use_pass(pattern: str) -> None:
    assert pattern_problem(pattern) is None


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("(a+)+b", "nested quantifiers"),
        ("([a-z]+)*", "nested quantifiers"),
        ("((a|b)+c){2,5}", "nested quantifiers"),
        (f"a{{1,{MAX_REPEAT + 1}}}", "over 128"),
        ("a{5000}", "over 128"),
        ("(?=x)y", "lookarounds"),
        (r"(a)\1", "backreferences"),
        ("a" * 513, "at most 512"),
    ],
)
def test_costly_patterns_are_refused_with_the_reason(pattern: str, why: str) -> None:
    problem = pattern_problem(pattern)
    assert problem is not None and why in problem


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab()[]{}*+?|\\^$.,0123456789:<>=!", max_size=40))
def test_the_pattern_scan_never_raises_whatever_it_is_given(pattern: str) -> None:
    problem = pattern_problem(pattern)
    assert problem is None or isinstance(problem, str)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "type",
                "items",
                "properties",
                "anyOf",
                "enum",
                "pattern",
                "$ref",
                "maxLength",
                "minimum",
            ]
        ),
        JSON,
    )
)
def test_any_json_is_either_accepted_or_refused_by_name(schema: dict[str, Any]) -> None:
    try:
        check_schema_limits(schema, P)
    except SchemaTooComplex as error:
        assert error.param.startswith(P) and error.limit.startswith("schema_")
