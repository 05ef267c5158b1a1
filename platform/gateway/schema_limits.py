"""Limits on tenant JSON Schemas, checked before a schema reaches an engine's grammar compiler.

A schema in `response_format`, a tool's `parameters` or the Responses API's `text.format`
is compiled by the engine (xgrammar in SGLang and vLLM) into a grammar and a token-mask
cache. That compilation runs on the engine's CPU, shared by every tenant on it, and some
features cost far more than their size suggests (measured with xgrammar 0.2.7, the version
SGLang 0.5.23 pins; docs/security.md has the table). Each limit below is derived
from what a real request needs, most from OpenAI's documented structured-output limits so
that a schema OpenAI takes is taken here.

The walk is iterative (a schema nested 900 deep must not exhaust the Python stack before the
depth limit refuses it) and schema-aware: it interprets keywords only where a subschema can
stand, so a property named `pattern` or an `enum` value holding `{"maxLength": 1}` is data.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from loraplex.errors import InvalidInput
from loraplex.gateway.schema_patterns import pattern_problem

MAX_SCHEMA_BYTES = 64 * 1024  # one schema, serialized: a 1,000-property schema is ~40 KiB
MAX_REQUEST_SCHEMA_BYTES = 256 * 1024  # every schema of one request (tools + format)
MAX_DEPTH = 32  # JSON levels: OpenAI's 10 schema levels, each up to 3 deep (anyOf, [, {)
MAX_SCHEMA_VALUES = 16_384  # objects, arrays and scalars a walk may visit (~8 ms)
MAX_PROPERTIES = 1_000  # in one schema; a required property costs ~0.2 ms to compile
MAX_OPTIONAL_PROPERTIES = 128  # in one object: optional ones compile super-linearly
MAX_ENUM_VALUES = 1_000  # in one schema, as OpenAI
MAX_BRANCHES = 1_000  # anyOf/oneOf/allOf alternatives in one schema
MAX_COUNT = 100_000  # minLength, maxItems, ...: the largest maxLength real tools send
MAX_NUMBER = 2**53 - 1  # exact in a double (RFC 8259, section 6); xgrammar fails past int64

COUNT_KEYWORDS = frozenset(
    {"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"}
    | {"minContains", "maxContains"}
)
SUBSCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
SUBSCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
BRANCH_KEYWORDS = ("anyOf", "oneOf", "allOf")
SUBSCHEMA_ONE = frozenset(
    {"not", "if", "then", "else", "additionalProperties", "unevaluatedProperties", "items"}
    | {"additionalItems", "unevaluatedItems", "contains", "propertyNames"}
)
INDEX = re.compile(r"^[0-9]{1,9}$")
IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")


class SchemaTooComplex(InvalidInput):
    """A tenant schema is over one of the limits; `limit` names it (for metrics and logs)."""

    code = "schema_too_complex"

    def __init__(self, detail: str, *, param: str, limit: str):
        super().__init__(detail, param=param)
        self.limit = limit


@dataclass
class _Totals:
    """What the walk has counted so far in one schema."""

    properties: int = 0
    enum_values: int = 0
    branches: int = 0


def check_schema_limits(schema: Any, param: str) -> int:
    """Refuse `schema` (found at `param`) if it is over a limit; its serialized size if not.

    Run this before anything else reads the schema. The cheap bounds come first, from the
    serialized text (bytes, and `{`, `[` and `,` as an upper bound on the values the walk
    will visit); then one iterative walk, with the GC paused like the body's decode.
    """
    text = _encoded(schema, param)
    if len(text) > MAX_SCHEMA_BYTES:
        raise SchemaTooComplex(
            f"{param} is {len(text)} bytes serialized; a schema may have at most "
            f"{MAX_SCHEMA_BYTES} bytes",
            param=param,
            limit="schema_bytes",
        )
    _over(_value_bound(text), MAX_SCHEMA_VALUES, "values", param, "schema_values")
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        refs = _check_tree(schema, param)
    finally:
        if was_enabled:
            gc.enable()
    for ref, where in refs:
        _check_ref(schema, ref, where)
    return len(text)


def check_request_schemas(schemas: list[tuple[str, Any]]) -> None:
    """Refuse a request whose schemas (`(param, schema)` pairs) together are over the
    request's budget; run before any one of them is walked."""
    if not schemas:
        return
    texts = [_encoded(schema, param) for param, schema in schemas]
    size, values = sum(map(len, texts)), sum(map(_value_bound, texts))
    param = schemas[0][0] if len(schemas) == 1 else "tools"
    if size > MAX_REQUEST_SCHEMA_BYTES:
        raise SchemaTooComplex(
            f"the request's schemas are {size} bytes together; at most "
            f"{MAX_REQUEST_SCHEMA_BYTES} are allowed",
            param=param,
            limit="request_schema_bytes",
        )
    _over(values, MAX_SCHEMA_VALUES, "values in its schemas together", param, "schema_values")


def _encoded(schema: Any, param: str) -> bytes:
    try:
        return msgspec.json.encode(schema)
    except RecursionError:  # nested near the interpreter's limit: far past MAX_DEPTH
        raise SchemaTooComplex(
            f"{param} nests more than {MAX_DEPTH} levels", param=param, limit="schema_depth"
        ) from None


def _value_bound(text: bytes) -> int:
    """An upper bound on the values in the JSON `text` (each but the first in a container
    follows a comma); counted in C, ~0.1 ms for 256 KiB."""
    return text.count(b"{") + text.count(b"[") + text.count(b",") + 1


def _check_tree(schema: Any, param: str) -> list[tuple[str, str]]:
    """Walk `schema` once: depth, numbers and keywords; its `$ref`s with their paths."""
    totals, refs = _Totals(), []
    for node, path, depth, is_schema in _walk(schema, param):
        if depth > MAX_DEPTH:
            where = path_text(path)
            raise SchemaTooComplex(
                f"{where} is nested {depth} levels deep; a schema may nest at most "
                f"{MAX_DEPTH} levels",
                param=where,
                limit="schema_depth",
            )
        if is_schema and isinstance(node, dict):
            where = path_text(path)
            _check_keywords(node, where, totals)
            if "$ref" in node:
                refs.append((node["$ref"], f"{where}.$ref"))
    return refs


Path = tuple[Any, ...]  # (parent path, key): rendered only when a refusal names it


def path_text(path: Path) -> str:
    """`path` as the parameter a refusal names (`tools[0].function.parameters.items`)."""
    keys: list[Any] = []
    while len(path) == 2:
        path, key = path
        keys.append(key)
    text = str(path[0])
    for key in reversed(keys):
        text = f"{text}[{key}]" if isinstance(key, int) else _child(text, key)
    return text


def _walk(root: Any, param: str) -> Iterator[tuple[Any, Path, int, bool]]:
    """Every object and array in `root`: (it, its path, its depth, whether it stands as a
    schema). Numbers are checked on the way (`_check_number`); other scalars are skipped."""
    stack: list[tuple[Any, Path, int, str]] = [(root, (param,), 1, SCHEMA)]
    while stack:
        node, path, depth, kind = stack.pop()
        yield node, path, depth, kind == SCHEMA
        if depth > MAX_DEPTH:
            continue  # the caller refuses it; never descend further
        if isinstance(node, dict):
            items: Any = node.items()
        else:
            items = enumerate(node)
        for key, value in items:
            if isinstance(value, dict | list):
                inner = _kind_of(kind, key) if isinstance(node, dict) else _list_kind(kind)
                stack.append((value, (path, key), depth + 1, inner))
            elif isinstance(value, int | float) and not isinstance(value, bool):
                _check_number(value, (path, key))


def _list_kind(parent: str) -> str:
    return DATA if parent == DATA else SCHEMA  # a list of schemas: anyOf, prefixItems


SCHEMA, DATA, SCHEMA_MAP = "schema", "data", "map"


def _kind_of(parent: str, key: str) -> str:
    """What the value under `key` is, in a parent of kind `parent`."""
    if parent == SCHEMA_MAP:
        return SCHEMA  # `properties.city`: a schema whatever its name
    if parent == DATA:
        return DATA
    if key in SUBSCHEMA_MAPS:
        return SCHEMA_MAP
    return SCHEMA if key in SUBSCHEMA_ONE or key in SUBSCHEMA_LISTS else DATA


def _child(path: str, key: str) -> str:
    if IDENTIFIER.match(key):
        return f"{path}.{key}"
    return f"{path}[{msgspec.json.encode(key[:64]).decode()}]"


def _check_number(number: float, path: Path) -> None:
    if abs(number) > MAX_NUMBER:
        where = path_text(path)
        raise SchemaTooComplex(
            f"{where} is {_short(number)}; numbers in a schema must be within ±{MAX_NUMBER}",
            param=where,
            limit="schema_number",
        )


def _check_keywords(schema: dict[str, Any], path: str, totals: _Totals) -> None:
    """The per-keyword limits of one (sub)schema object."""
    for key in COUNT_KEYWORDS.intersection(schema):
        value = schema[key]
        if isinstance(value, int | float) and not isinstance(value, bool) and value > MAX_COUNT:
            raise SchemaTooComplex(
                f"{path}.{key} is {_short(value)}; at most {MAX_COUNT} is allowed",
                param=f"{path}.{key}",
                limit="schema_count",
            )
    properties = schema.get("properties")
    if isinstance(properties, dict):
        _count_properties(properties, schema.get("required"), path, totals)
    enum = schema.get("enum")
    if isinstance(enum, list):
        totals.enum_values += len(enum)
        _over(totals.enum_values, MAX_ENUM_VALUES, "enum values", f"{path}.enum", "schema_enum")
    for key in BRANCH_KEYWORDS:
        branches = schema.get(key)
        if isinstance(branches, list):
            totals.branches += len(branches)
            _over(totals.branches, MAX_BRANCHES, "anyOf/oneOf/allOf branches", f"{path}.{key}",
                  "schema_branches")  # fmt: skip
    _check_patterns(schema, path)


def _count_properties(properties: dict[str, Any], required: Any, path: str, t: _Totals) -> None:
    where = f"{path}.properties"
    t.properties += len(properties)
    _over(t.properties, MAX_PROPERTIES, "properties", where, "schema_properties")
    named = set(required) if isinstance(required, list) else set()
    optional = sum(1 for name in properties if name not in named)
    if optional > MAX_OPTIONAL_PROPERTIES:
        raise SchemaTooComplex(
            f"{where} has {optional} optional properties (not in `required`); an object may "
            f"have at most {MAX_OPTIONAL_PROPERTIES}: list more of them in `required`",
            param=where,
            limit="schema_optional_properties",
        )


def _check_patterns(schema: dict[str, Any], path: str) -> None:
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        _refuse_pattern(pattern, f"{path}.pattern")
    by_pattern = schema.get("patternProperties")
    if isinstance(by_pattern, dict):
        for key in by_pattern:
            _refuse_pattern(key, _child(f"{path}.patternProperties", key))


def _refuse_pattern(pattern: str, path: str) -> None:
    problem = pattern_problem(pattern)
    if problem is not None:
        raise SchemaTooComplex(f"{path}: {problem}", param=path, limit="schema_pattern")


def _over(count: int, limit: int, what: str, path: str, name: str) -> None:
    if count > limit:
        raise SchemaTooComplex(
            f"{path}: the schema has more than {limit} {what}; at most {limit} are allowed",
            param=path,
            limit=name,
        )


def _short(number: float) -> str:
    text = repr(number)
    return text if len(text) <= 24 else f"{text[:12]}… ({len(text)} digits)"


def _check_ref(schema: Any, ref: Any, where: str) -> None:
    """`ref` is local (`#`, `#/$defs/…`), names a schema, and its chain of references does
    not loop without content (`a` → `b` → `a`)."""
    seen: set[str] = set()
    while isinstance(ref, str):
        target = _resolve(schema, ref, where)
        if ref in seen:
            raise SchemaTooComplex(
                f"{where}: the references {sorted(seen)} loop without content",
                param=where,
                limit="schema_ref",
            )
        seen.add(ref)
        ref = target.get("$ref") if len(target) == 1 else None


def _resolve(root: Any, ref: str, where: str) -> dict[str, Any]:
    """The schema a local JSON Pointer `ref` names in `root`, or a refusal."""
    if not ref.startswith("#") or (len(ref) > 1 and not ref.startswith("#/")):
        raise SchemaTooComplex(
            # Not echoed: a remote reference is a URL, and errors never carry one.
            f"{where} is not a local reference: only #/$defs/… references are allowed",
            param=where,
            limit="schema_ref",
        )
    node = root
    for token in ref[2:].split("/") if len(ref) > 1 else []:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and INDEX.match(token) and int(token) < len(node):
            node = node[int(token)]
        else:
            node = None
            break
    if not isinstance(node, dict):
        raise SchemaTooComplex(
            f"{where} is {ref[:80]!r}, which names no schema in this document",
            param=where,
            limit="schema_ref",
        )
    return node
