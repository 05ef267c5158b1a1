"""The whole OpenAI inference surface through the gateway, against the real vLLM engine.

Differential: each feature is sent straight to the engine (the adapter under its engine-side
name) and through the gateway (the tenant's name); under greedy decoding both give the same
text, the same tool calls and the same logprobs.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import httpx
import jsonschema
import pytest
from openai import OpenAI
from pydantic import BaseModel

from loraplex.dev.corpus import VERDICT_SCHEMA
from tests.integration.conftest import RANKS, Served
from tests.integration.gateway.surface import Direct, comparable, direct_for, tool_adapter

pytestmark = pytest.mark.engine
ASK = [{"role": "user", "content": "What is the code word?"}]
GREEDY = {"temperature": 0, "max_tokens": 24}
USAGE_FLUSH_S = 5  # the gateway writes usage to the database this often


@pytest.fixture(scope="module")
def vllm(platform: Any) -> Served:
    return platform.get("vllm")


@pytest.fixture(scope="module")
def direct(vllm: Served) -> Direct:
    return direct_for(vllm)


def _client(served: Served) -> OpenAI:
    return OpenAI(base_url=f"{served.url}/v1", api_key=served.key, max_retries=0, timeout=120)


FEATURES: dict[str, dict[str, Any]] = {
    "json_object": {"response_format": {"type": "json_object"}, "max_tokens": 48},
    "json_schema": {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": VERDICT_SCHEMA, "strict": True},
        },
        "max_tokens": 48,
    },
    "logprobs": {"logprobs": True, "top_logprobs": 3},
    "n": {"n": 3, "temperature": 1.0, "seed": 11},
    "penalties": {"presence_penalty": 1.5, "frequency_penalty": 1.0},
    "logit_bias": {"logit_bias": {"10": -100, "11": -100, "12": 100}},
    "seed": {"seed": 7, "temperature": 1.0},
    "metadata_store_user": {"metadata": {"team": "search"}, "store": False, "user": "u-1"},
}


@pytest.mark.parametrize("feature", sorted(FEATURES))
@pytest.mark.parametrize("who", ["base", "adapter"])
def test_chat_feature_through_the_gateway_equals_the_engine(
    vllm: Served, direct: Direct, feature: str, who: str
) -> None:
    model = vllm.base if who == "base" else vllm.adapters[RANKS[0]][0]
    body = {"messages": ASK, **GREEDY, **FEATURES[feature]}
    ours = direct.gateway("/v1/chat/completions", model, body)
    theirs = direct.engine("/v1/chat/completions", model, body)
    assert comparable(ours) == comparable(theirs)
    assert len(ours["choices"]) == body.get("n", 1)


@pytest.mark.parametrize("who", ["base", "adapter"])
def test_completions_logprobs_and_n_equal_the_engine(
    vllm: Served, direct: Direct, who: str
) -> None:
    model = vllm.base if who == "base" else vllm.adapters[RANKS[0]][0]
    body = {"prompt": "Once upon a time", **GREEDY, "logprobs": 2, "n": 2, "temperature": 1.0}
    body["seed"] = 5
    ours = direct.gateway("/v1/completions", model, body)
    theirs = direct.engine("/v1/completions", model, body)
    assert comparable(ours) == comparable(theirs)
    assert len(ours["choices"][0]["logprobs"]["top_logprobs"][0]) == 2


def test_streamed_logprobs_and_choices_equal_the_whole_reply(vllm: Served) -> None:
    body = {"messages": ASK, **GREEDY, "n": 2, "logprobs": True, "top_logprobs": 2}
    body.update(temperature=1.0, seed=3)
    whole = _client(vllm).chat.completions.create(model=vllm.base, **body)
    texts = {0: "", 1: ""}
    tokens: dict[int, list[str]] = {0: [], 1: []}
    for chunk in _client(vllm).chat.completions.create(model=vllm.base, stream=True, **body):
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.logprobs and choice.logprobs.content:
                tokens[choice.index] += [entry.token for entry in choice.logprobs.content]
    for choice in whole.choices:
        assert texts[choice.index] == choice.message.content
        assert tokens[choice.index] == [e.token for e in choice.logprobs.content]  # type: ignore[union-attr]


def test_json_schema_answers_validate_for_a_batch_of_prompts(vllm: Served) -> None:
    client = _client(vllm)
    questions = ["Is this good?", "The parcel never came.", "Hello there", "Rate: 3/5", "Help!"]
    for question in questions:
        reply = client.chat.completions.create(
            model=vllm.adapters[RANKS[0]][0],
            messages=[{"role": "user", "content": question}],
            temperature=0,
            max_tokens=64,
            response_format=FEATURES["json_schema"]["response_format"],
        )
        jsonschema.validate(json.loads(reply.choices[0].message.content or ""), VERDICT_SCHEMA)


class Verdict(BaseModel):
    label: Literal["positive", "negative", "neutral"]
    urgent: bool


def test_sdk_parse_helper_returns_a_parsed_pydantic_object(vllm: Served) -> None:
    reply = _client(vllm).chat.completions.parse(
        model=vllm.base,
        messages=[{"role": "user", "content": "The parcel never came."}],
        temperature=0,
        max_tokens=64,
        response_format=Verdict,
    )
    assert isinstance(reply.choices[0].message.parsed, Verdict)


def test_n_choices_are_billed_n_times(vllm: Served) -> None:
    client = _client(vllm)
    # The end-of-turn token forbidden: every choice runs to max_tokens, so each costs 8.
    never_end = {"logit_bias": {str(_end_of_turn_id(vllm)): -100}, "max_tokens": 8}
    sampled = {"temperature": 1.0, "seed": 5, **never_end}
    before = _settled_completion_tokens(vllm)  # earlier tests' usage is flushed behind them
    three = client.chat.completions.create(model=vllm.base, messages=ASK, n=3, **sampled)
    assert [c.index for c in three.choices] == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in three.choices)
    assert three.usage and three.usage.completion_tokens == 3 * 8
    _wait_for(
        lambda: _completion_tokens(vllm) - before == 3 * 8,
        lambda: _completion_tokens(vllm) - before,
    )


def _end_of_turn_id(served: Served) -> int:
    from tokenizers import Tokenizer

    from loraplex.dev.corpus import IM_END

    tokenizer = Tokenizer.from_file(str(served.engine.model_dir / "tokenizer.json"))
    return int(tokenizer.token_to_id(IM_END))


def _settled_completion_tokens(served: Served) -> int:
    import time

    last = _completion_tokens(served)
    for _ in range(10):
        time.sleep(USAGE_FLUSH_S + 1)
        now = _completion_tokens(served)
        if now == last:
            return now
        last = now
    raise AssertionError("the tenant's usage never stopped changing")


def _completion_tokens(served: Served) -> int:
    report = httpx.get(
        f"{served.url}/api/v1/tenants/{served.tenant_id}/usage",
        params={"group_by": "day"},
        headers=served.headers(),
        timeout=30,
    ).json()
    return int(report["totals"]["completion_tokens"])


def _wait_for(condition: Any, seen: Any, timeout_s: float = 20) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"usage never showed the request's tokens: it shows {seen()}")


def test_models_retrieve_returns_one_model_and_404s_an_unknown(vllm: Served) -> None:
    client = _client(vllm)
    name = vllm.adapters[RANKS[0]][0]
    assert client.models.retrieve(name).id == name
    assert client.models.retrieve(f"{name}@v1").id == f"{name}@v1"
    response = httpx.get(f"{vllm.url}/v1/models/no-such-model", headers=vllm.headers(), timeout=30)
    assert response.status_code == 404 and response.json()["error"]["param"] == "model"


# Tool calls: the tool adapter was trained to answer its questions with a function call.


@pytest.fixture(scope="module")
def tools(vllm: Served, platform: Any) -> tuple[str, list[dict], list[tuple[str, dict]]]:
    return tool_adapter(vllm, platform)


@pytest.fixture
def each(served_each: Served) -> Served:
    """The tests of what a user sees (not engine-vs-gateway) run on each engine kind."""
    return served_each


@pytest.fixture
def each_tools(each: Served, platform: Any) -> tuple[str, list[dict], list[tuple[str, dict]]]:
    return tool_adapter(each, platform)


def test_tool_adapter_answers_with_a_parsed_tool_call(each: Served, each_tools: Any) -> None:
    vllm, (name, specs, examples) = each, each_tools
    question, call = examples[0]
    reply = _client(vllm).chat.completions.create(
        model=name,
        messages=[{"role": "user", "content": question}],
        tools=specs,
        temperature=0,
        max_tokens=64,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    (made,) = choice.message.tool_calls or []
    assert made.function.name == call["name"]
    assert json.loads(made.function.arguments) == call["arguments"]
    assert reply.usage and reply.usage.completion_tokens > 0


def test_streamed_tool_call_deltas_assemble_into_the_same_call(
    each: Served, each_tools: Any
) -> None:
    # On SGLang the driver runs this request whole upstream (its streaming parser can drop
    # a call's arguments under load, docs/engines.md §11.1); the client still streams.
    vllm, (name, specs, examples) = each, each_tools
    question, call = examples[0]
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in _client(vllm).chat.completions.create(
        model=name,
        messages=[{"role": "user", "content": question}],
        tools=specs,
        temperature=0,
        max_tokens=64,
        stream=True,
    ):
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                entry = calls.setdefault(delta.index, {"name": "", "arguments": ""})
                if delta.function and delta.function.name:
                    entry["name"] += delta.function.name
                if delta.function and delta.function.arguments:
                    entry["arguments"] += delta.function.arguments
    assert finish == "tool_calls"
    assert [c["name"] for c in calls.values()] == [call["name"]]
    assert json.loads(calls[0]["arguments"]) == call["arguments"]


@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_tool_calls_through_the_gateway_equal_the_engine(
    vllm: Served, direct: Direct, tools: Any, choice: str
) -> None:
    name, specs, examples = tools
    tool_choice: Any = (
        {"type": "function", "function": {"name": specs[0]["function"]["name"]}}
        if choice == "named"
        else choice
    )
    body = {
        "messages": [{"role": "user", "content": examples[0][0]}],
        "tools": specs,
        "tool_choice": tool_choice,
        "temperature": 0,
        "max_tokens": 64,
    }
    assert comparable(direct.gateway("/v1/chat/completions", name, body)) == comparable(
        direct.engine("/v1/chat/completions", name, body)
    )


def test_a_tool_result_turn_is_accepted_and_answered(vllm: Served, tools: Any) -> None:
    name, specs, examples = tools
    question, call = examples[0]
    reply = _client(vllm).chat.completions.create(
        model=name,
        messages=[
            {"role": "user", "content": question},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": call["name"],
                            "arguments": json.dumps(call["arguments"]),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
        ],
        tools=specs,
        temperature=0,
        max_tokens=16,
    )
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_choices_logprobs_and_json_schema_on_each_engine(each: Served) -> None:
    client = _client(each)
    reply = client.chat.completions.create(
        model=each.adapters[RANKS[0]][0],
        messages=ASK,
        max_tokens=8,
        n=2,
        temperature=1.0,
        seed=1,
        logprobs=True,
        top_logprobs=2,
    )
    assert [c.index for c in reply.choices] == [0, 1]
    for choice in reply.choices:
        entries = choice.logprobs.content if choice.logprobs else None
        assert entries and all(len(e.top_logprobs) == 2 for e in entries)
    shaped = client.chat.completions.create(
        model=each.base,
        messages=[{"role": "user", "content": "The parcel never came."}],
        temperature=0,
        max_tokens=64,
        response_format=FEATURES["json_schema"]["response_format"],
    )
    jsonschema.validate(json.loads(shaped.choices[0].message.content or ""), VERDICT_SCHEMA)
    text = client.completions.create(
        model=each.base, prompt="Once upon a time", max_tokens=4, temperature=0, logprobs=1
    )
    assert text.choices[0].logprobs and len(text.choices[0].logprobs.tokens or []) == 4


def test_responses_api_returns_the_tool_adapters_call(each: Served, each_tools: Any) -> None:
    name, specs, examples = each_tools
    question, call = examples[0]
    flat = [{"type": "function", **spec["function"]} for spec in specs]
    response = _client(each).responses.create(
        model=name, input=question, tools=flat, temperature=0, max_output_tokens=64
    )
    (item,) = [i for i in response.output if i.type == "function_call"]
    assert item.name == call["name"] and json.loads(item.arguments) == call["arguments"]
