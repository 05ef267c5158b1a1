"""Tenant A sends hostile JSON bodies, schemas and names while tenant B streams."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from tests.security import hostile
from tests.security.conftest import Outcome, Target, check

BodyOf = Callable[[str], bytes]

CHAT_CASES: list[tuple[str, str, BodyOf, tuple[str, ...]]] = [
    (
        "JSON body",
        "messages nested 500k deep",
        lambda _m: hostile.deep_json_body(),
        ("deep", "characters"),
    ),
    ("JSON body", "4,300-digit max_tokens", hostile.huge_number_body, ("max_tokens", "number")),
    ("JSON body", "200k messages (6 MB)", hostile.wide_body, ("messages", "bytes", "large")),
    ("JSON body", "9 MB of whitespace", lambda m: b" " * (9 * 2**20) + b"{}", ("bytes", "large")),
    ("JSON schema", "schema nested 2,000 deep", hostile.deep_schema_body, ("deep", "depth")),
    ("JSON schema", "minItems of 10^9", hostile.repetition_schema_body, ("minitems",)),
]

HOSTILE_NAMES = ["bot\n", "bot\u202egpj", "bot\x00", "b" * 10_000, "\uff42\uff4f\uff54", "../bot"]


def _post_raw(target: Target, path: str, body: bytes) -> Outcome:
    outcome = Outcome()
    headers = {**target.a.headers, "Content-Type": "application/json"}
    with httpx.Client(base_url=target.url, headers=headers, timeout=120) as http:
        outcome.add(http.post(path, content=body))
    return outcome


@pytest.mark.parametrize(
    ("attack_class", "case", "body_of", "names"), CHAT_CASES, ids=[c[1] for c in CHAT_CASES]
)
def test_hostile_chat_body_is_refused_and_b_never_notices(
    target: Target, attack_class: str, case: str, body_of: BodyOf, names: tuple
) -> None:
    body = body_of(target.model)
    attack = lambda: _post_raw(target, "/v1/chat/completions", body)  # noqa: E731
    check(target.measure(case, attack_class, attack), names=names)


def test_hostile_control_plane_body_is_refused_and_b_never_notices(target: Target) -> None:
    body = b'{"name":"x","base_model":' + b"[" * 500_000 + b"]" * 500_000 + b"}"
    path = f"/api/v1/tenants/{target.a.id}/adapters"
    measured = target.measure(
        "adapter create nested 500k deep", "JSON body", lambda: _post_raw(target, path, body)
    )
    check(measured, names=("deep", "json", "base_model"))


def test_hostile_adapter_names_are_refused(target: Target) -> None:
    def attack() -> Outcome:
        outcome = Outcome()
        path = f"/api/v1/tenants/{target.a.id}/adapters"
        with httpx.Client(base_url=target.url, headers=target.a.headers, timeout=30) as http:
            for name in HOSTILE_NAMES:
                outcome.add(http.post(path, json={"name": name, "base_model": target.model}))
        return outcome

    measured = target.measure("odd Unicode, NUL, newline, 10k chars", "names", attack)
    check(measured, names=("name",))
    assert all(s in (400, 422) for s in measured.outcome.statuses), measured.outcome.statuses


def test_a_megabyte_prompt_is_counted_off_the_event_loop(target: Target) -> None:
    # ~1 MB of text: the gateway renders and tokenizes it to refuse it as over the context.
    content = "hello world, this is a test of tokens. " * 25_000
    body = {"model": target.counted_model, "messages": [{"role": "user", "content": content}]}
    raw = json.dumps(body).encode()
    attack = lambda: _post_raw(target, "/v1/chat/completions", raw)  # noqa: E731
    check(target.measure("a 1 MB prompt", "tokenisation", attack), names=("context", "tokens"))
