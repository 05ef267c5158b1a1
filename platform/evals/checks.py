"""Checks of tenant-sent eval input, run before anything is stored or generated.

Item schemas and grader schemas go through the gateway's schema limits (bytes, depth,
numbers, patterns) before jsonschema compiles them; items are bounded in depth and bytes and
validated against the eval's item schema. Every refusal is an `InvalidInput` naming the
parameter, so the tenant sees a 400 that says what to fix.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema_rs
import msgspec

from loraplex.errors import InvalidInput
from loraplex.evals.schemas import MAX_ITEMS, Row
from loraplex.finetune.datasets import DatasetStats
from loraplex.gateway.options import check_json_schema

EVALS_PURPOSE = "evals"  # the file purpose of eval items (POST /v1/files)
MAX_ITEM_DEPTH = 16
MAX_ITEM_BYTES = 64 * 1024


def check_schema(schema: dict[str, Any], param: str) -> Any:
    """A validator for a tenant's JSON schema, once it is within the gateway's schema limits
    and a valid JSON Schema (the same check as response_format schemas)."""
    check_json_schema(schema, param)
    return jsonschema_rs.validator_for(schema)


def check_items(items: list[dict[str, Any]], validator: Any, param: str) -> None:
    """Refuse items nested too deep, too large, or not matching the eval's item schema."""
    for index, item in enumerate(items):
        where = f"{param}[{index}]"
        if depth(item) > MAX_ITEM_DEPTH:
            raise InvalidInput(f"{where} nests more than {MAX_ITEM_DEPTH} levels", param=where)
        if len(msgspec.json.encode(item)) > MAX_ITEM_BYTES:
            raise InvalidInput(f"{where} is over {MAX_ITEM_BYTES} bytes", param=where)
        error = next(iter(validator.iter_errors(item)), None)
        if error is not None:
            raise InvalidInput(
                f"{where} does not match the eval's item_schema: {error.message[:300]}",
                param=where,
            )


def depth(value: Any) -> int:
    """How many containers deep `value` nests (iterative: a hostile item cannot recurse)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            if level > MAX_ITEM_DEPTH:
                continue
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, level + 1) for child in children)
    return deepest


def parse_lines(lines: Iterable[bytes], param: str) -> list[dict[str, Any]]:
    """The items of an evals JSONL file: one `{"item": {...}}` object a line."""
    items: list[dict[str, Any]] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if len(items) >= MAX_ITEMS:
            raise InvalidInput(f"{param} has more than {MAX_ITEMS} items", param=param)
        if len(raw) > MAX_ITEM_BYTES:
            raise InvalidInput(f"{param} line {number} is over {MAX_ITEM_BYTES} bytes", param=param)
        try:
            items.append(msgspec.json.decode(raw, type=Row).item)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            raise InvalidInput(
                f'{param} line {number} is not a JSON object {{"item": {{...}}}}', param=param
            ) from None
    if not items:
        raise InvalidInput(f"{param} holds no items", param=param)
    return items


def sample_schema() -> dict[str, Any]:
    """The `sample` namespace templates may refer to (OpenAI's, reduced to what runs fill)."""
    return {
        "type": "object",
        "properties": {
            "output_text": {"type": "string"},
            "output_json": {"type": "object"},
            "model": {"type": "string"},
            "finish_reason": {"type": "string"},
        },
        "required": ["output_text", "model"],
    }


def full_schema(item_schema: dict[str, Any], include_sample: bool) -> dict[str, Any]:
    """The `schema` OpenAI shows for a custom data source: `item`, and `sample` if asked."""
    properties: dict[str, Any] = {"item": item_schema}
    if include_sample:
        properties["sample"] = sample_schema()
    return {"type": "object", "properties": properties, "required": list(properties)}


def encoded_size(value: Any) -> int:
    """Bytes of `value` as JSON (for bounding what is stored)."""
    return len(json.dumps(value))


def check_eval_file(path: Path, max_bytes: int) -> DatasetStats:
    """Check an uploaded evals JSONL file from disk: its size, then every line's shape.
    Runs in the API's worker processes (loraplex.cpu_pool), as training files' checks do."""
    size = path.stat().st_size
    if size > max_bytes:
        raise InvalidInput(f"the file is over {max_bytes} bytes", param="file")
    with path.open("rb") as handle:
        items = parse_lines(iter(handle), "file")
    return DatasetStats(
        rows=len(items), size_bytes=size, assistant_turns=0, tokens=0, tokens_counted=False
    )
