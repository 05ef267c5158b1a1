"""OpenAI's eval templates: `{{item.answer}}` and `{{sample.output_text}}` filled in.

A reference names a dotted path under `item` (the data source row) or `sample` (what the
model answered: `output_text`, and `output_json` when it parsed as JSON). A path that does
not resolve renders as the empty string, as OpenAI's do; objects and lists render as JSON.
"""

from __future__ import annotations

import json
import re
from typing import Any

REFERENCE = re.compile(r"\{\{\s*((?:item|sample)(?:\.[A-Za-z0-9_-]+)*)\s*\}\}")
ROOTS = ("item", "sample")


def render(template: str, context: dict[str, Any]) -> str:
    """`template` with each `{{item.x}}` / `{{sample.y}}` replaced by its value."""
    return REFERENCE.sub(lambda match: _text(_lookup(context, match.group(1))), template)


def references(template: str) -> list[str]:
    """The dotted paths `template` refers to (for checking a template before a run)."""
    return REFERENCE.findall(template)


def _lookup(context: dict[str, Any], path: str) -> Any:
    value: Any = context
    for key in path.split("."):
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return ""
    return value


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)
