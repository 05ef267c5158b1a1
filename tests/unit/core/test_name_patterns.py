"""Names end where they end: a trailing newline is not part of a valid name (msgspec's
patterns search, and `$` matches before a final newline)."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from loraplex.control.adapters.schemas import ALIAS_PATTERN, AdapterName, AliasName
from loraplex.control.base_models.service import ModelName
from loraplex.control.tenants.schemas import PlanName, Slug


@pytest.mark.parametrize("kind", [AdapterName, AliasName, ModelName, PlanName, Slug])
def test_a_name_with_a_trailing_newline_is_refused(kind: object) -> None:
    assert msgspec.convert("acme", kind) == "acme"
    for bad in ("acme\n", "acme\n\n", "\nacme"):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(bad, kind)


def test_the_alias_pattern_refuses_a_trailing_newline_with_fullmatch_too() -> None:
    assert re.fullmatch(ALIAS_PATTERN, "prod")
    assert not re.fullmatch(ALIAS_PATTERN, "prod\n")


def test_no_pattern_in_the_code_lets_a_trailing_newline_through() -> None:
    # Every anchored pattern a schema declares must refuse "name\n": `$` alone does not.
    root = Path(__file__).resolve().parents[3]
    loose = [
        f"{path.relative_to(root)}:{number}"
        for folder in ("platform", "web", "adapters", "workers")
        for path in (root / folder).rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"pattern=r?\"[^\"]*\$\"", line)
    ]
    assert not loose, f"end these patterns with $(?!\\n): {loose}"
