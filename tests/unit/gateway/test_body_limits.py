"""/v1 JSON bodies: what a tenant sends is bounded before the costly step, every refusal a
400 naming the parameter, never a 500."""

from __future__ import annotations

import contextlib
import gc
import json
from typing import Any

import pytest

from loraplex.errors import InvalidInput
from loraplex.gateway.body_limits import MAX_CONTAINERS, BodyTooComplex, container_bound
from loraplex.gateway.options import checked_logit_bias
from loraplex.gateway.responses_schema import decode_request
from loraplex.gateway.schemas import (
    MAX_CONTENT_PARTS,
    MAX_LOGIT_BIAS,
    MAX_MESSAGES,
    MAX_STOP_CHARS,
    MAX_TOOL_CALLS,
    decode_body,
)

USER = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "messages": USER, **fields}).encode()


def refused(raw: bytes) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        decode_body(raw, "chat").validated_messages()
    return caught.value


def test_more_brackets_than_a_request_needs_are_refused_before_decoding() -> None:
    raw = b'{"model":"m","messages":[' + b",".join([b"[]"] * MAX_CONTAINERS) + b"]}"
    assert container_bound(raw) > MAX_CONTAINERS
    assert isinstance(refused(raw), BodyTooComplex)


def test_a_long_prompt_of_code_fits_the_bracket_bound() -> None:
    code = "for (i = 0; i < n; i++) { a[i] = b[i]; }\n" * 20_000  # 820 KB, 60k brackets
    raw = chat(messages=[{"role": "user", "content": code}])
    assert decode_body(raw, "chat").validated_messages()[0]["content"] == code


def test_nesting_past_the_decoders_limit_is_a_400_not_a_500() -> None:
    raw = b'{"model":"m","messages":[{"role":"user","content":"x","y":%s}]}' % (
        b"[" * 20_000 + b"]" * 20_000
    )
    assert isinstance(refused(raw), BodyTooComplex)


def test_the_gc_is_running_again_after_a_decode_whatever_its_outcome() -> None:
    for raw in (chat(), b"{", b"[" * 5_000):
        with contextlib.suppress(InvalidInput):
            decode_body(raw, "chat")
        assert gc.isenabled()


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b'{"model":"m","messages":[],"max_tokens":1' + b"0" * 100 + b"}", "max_tokens"),
        (b'{"model":"m","messages":[],"max_tokens":' + b"9" * 4_300 + b"}", "max_tokens"),
        (b'{"model":"m","messages":[],"max_tokens":' + b"9" * 100_000 + b"}", "max_tokens"),
        (b'{"model":"m","messages":[],"temperature":1e400}', "temperature"),
        (b'{"model":"m","messages":[],"seed":' + b"9" * 30 + b"}", "seed"),
        (b'{"model":"m","messages":[],"n":' + b"9" * 30 + b"}", "n"),
    ],
)
def test_huge_numbers_are_refused_at_their_parameter(raw: bytes, param: str) -> None:
    assert refused(raw).param == param


def test_a_float_with_a_hundred_thousand_digits_decodes_to_a_plain_float() -> None:
    raw = b'{"model":"m","messages":[],"temperature":0.' + b"1" * 100_000 + b"}"
    assert decode_body(raw, "chat").temperature == pytest.approx(1 / 9)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": USER * (MAX_MESSAGES + 1)}, "messages"),
        ({"logit_bias": {str(i): 1 for i in range(MAX_LOGIT_BIAS + 1)}}, "logit_bias"),
        ({"stop": ["x" * (MAX_STOP_CHARS + 1)]}, "stop[0]"),
        ({"stop": "x" * (MAX_STOP_CHARS + 1)}, "stop"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ],
)
def test_counts_and_lengths_a_request_never_needs_are_refused(
    fields: dict[str, Any], param: str
) -> None:
    assert refused(chat(**fields)).param == param


def test_content_parts_and_tool_calls_are_bounded_per_message() -> None:
    parts = [{"type": "text", "text": "a"}] * (MAX_CONTENT_PARTS + 1)
    assert refused(chat(messages=[{"role": "user", "content": parts}])).param == (
        "messages[0].content"
    )
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    turn = {"role": "assistant", "content": None, "tool_calls": [call] * (MAX_TOOL_CALLS + 1)}
    assert refused(chat(messages=[*USER, turn])).param == "messages[1].tool_calls"


@pytest.mark.parametrize("key", ["²", "٣", "1" * 10, "-1", " 1"])
def test_logit_bias_keys_are_ascii_token_ids(key: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        checked_logit_bias({key: 1.0}, 1_000)
    assert caught.value.param == "logit_bias"


def test_the_responses_api_bounds_its_body_the_same_way() -> None:
    items = [{"role": "user", "content": "hi"}] * (MAX_MESSAGES + 1)
    with pytest.raises(InvalidInput) as caught:
        decode_request(json.dumps({"model": "m", "input": items}).encode())
    assert caught.value.param == "input"
    with pytest.raises(BodyTooComplex):
        decode_request(b'{"model":"m","input":"x","conversation":' + b"[" * 10_000 + b"]" * 10_000)
