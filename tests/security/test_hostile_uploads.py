"""Tenant A uploads hostile adapters and training files while tenant B streams.

Each case: a 4xx naming the problem, B's longest pause within 3x its pause alone, the API's
peak RSS growing less than 64 MiB, nothing stored, and the process serving afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.security import hostile
from tests.security.conftest import Outcome, Target, check

Builder = Callable[[Path], list[Path]]

ADAPTER_CASES: list[tuple[str, str, Builder, tuple[str, ...]]] = [
    ("safetensors", "big-integer dimensions", hostile.big_integer_dimensions, ("dimension",)),
    ("safetensors", "24 MB header", hostile.huge_header, ("header",)),
    ("safetensors", "header nested 300k deep", hostile.deep_header, ("nested", "json")),
    ("adapter config", "config nested 30k deep", hostile.deep_config, ("nest", "json")),
    ("archive", "zip of 200k entries", hostile.zip_with_many_entries, ("entries",)),
    ("archive", "48 MB pax record", hostile.tar_with_a_huge_pax_record, ("pax record",)),
    ("archive", "zip bomb (600 MB of zeros)", hostile.zip_bomb, ("more than",)),
]

FILE_CASES: list[tuple[str, str, Builder, tuple[str, ...]]] = [
    ("training file", "one 48 MB line", hostile.jsonl_one_long_line, ("longer than",)),
    ("training file", "a line nested 1M deep", hostile.jsonl_deep_line, ("nested",)),
    ("training file", "gzip bytes as JSONL", hostile.gzip_bomb_jsonl, ("line 1",)),
]


def _send(target: Target, path: str, files: list[Path], data: dict[str, str]) -> Outcome:
    outcome = Outcome()
    handles = [p.open("rb") for p in files]
    try:
        parts = [
            ("file", (p.name, h, "application/octet-stream"))
            for p, h in zip(files, handles, strict=True)
        ]
        with httpx.Client(base_url=target.url, headers=target.a.headers, timeout=300) as http:
            outcome.add(http.post(path, files=parts, data=data))
    finally:
        for handle in handles:
            handle.close()
    return outcome


@pytest.mark.parametrize(
    ("attack_class", "case", "build", "names"), ADAPTER_CASES, ids=[c[1] for c in ADAPTER_CASES]
)
def test_hostile_adapter_upload_is_refused_and_b_never_notices(
    target: Target, tmp_path: Path, attack_class: str, case: str, build: Builder, names: tuple
) -> None:
    files = build(tmp_path / "upload")
    path = f"/api/v1/tenants/{target.a.id}/adapters/target/versions"
    measured = target.measure(case, attack_class, lambda: _send(target, path, files, {}))
    check(measured, names=names)


@pytest.mark.parametrize(
    ("attack_class", "case", "build", "names"), FILE_CASES, ids=[c[1] for c in FILE_CASES]
)
def test_hostile_training_file_is_refused_and_b_never_notices(
    target: Target, tmp_path: Path, attack_class: str, case: str, build: Builder, names: tuple
) -> None:
    files = build(tmp_path / "upload")
    data = {"purpose": "fine-tune"}
    measured = target.measure(case, attack_class, lambda: _send(target, "/v1/files", files, data))
    check(measured, names=names)
