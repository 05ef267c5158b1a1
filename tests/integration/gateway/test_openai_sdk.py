"""The official openai SDK, unchanged, gets the same greedy answers PEFT computes in-process."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from openai import OpenAI

from tests.integration.conftest import RANKS, Served

pytestmark = pytest.mark.engine


@pytest.fixture
def served(served_each: Served) -> Served:
    """Every test here runs on each engine kind (SGLang, vLLM)."""
    return served_each


QUESTIONS_PER_ADAPTER = 3


@cache
def _reference(model_dir: Path, folder: Path, seed: int) -> tuple[tuple[str, str], ...]:
    from loraplex.dev.corpus import adapter_examples
    from loraplex.dev.reference import greedy_answers

    questions = [q for q, _ in adapter_examples(seed)][:QUESTIONS_PER_ADAPTER]
    return tuple(
        zip(questions, greedy_answers(model_dir, folder, questions, max_new_tokens=32), strict=True)
    )


def _client(served: Served) -> OpenAI:
    return OpenAI(base_url=f"{served.url}/v1", api_key=served.key, max_retries=0, timeout=120)


@pytest.mark.parametrize("rank", RANKS)
def test_chat_answers_equal_peft_reference(served: Served, rank: int) -> None:
    name, folder = served.adapters[rank]
    client = _client(served)
    for question, expected in _reference(served.engine.model_dir, folder, rank):
        reply = client.chat.completions.create(
            model=name,
            messages=[{"role": "user", "content": question}],
            temperature=0,
            max_tokens=32,
        )
        assert reply.choices[0].message.content == expected
        assert reply.model == name and reply.usage and reply.usage.completion_tokens > 0


@pytest.mark.parametrize("rank", RANKS)
def test_streamed_answers_equal_peft_reference(served: Served, rank: int) -> None:
    name, folder = served.adapters[rank]
    client = _client(served)
    for question, expected in _reference(served.engine.model_dir, folder, rank):
        chunks = list(
            client.chat.completions.create(
                model=f"{name}@v1",
                messages=[{"role": "user", "content": question}],
                temperature=0,
                max_tokens=32,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == expected
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
        assert {c.id for c in chunks} == {chunks[0].id}


def test_base_model_does_not_know_the_trained_answers(served: Served) -> None:
    _, folder = served.adapters[RANKS[0]]
    question, expected = _reference(served.engine.model_dir, folder, RANKS[0])[0]
    reply = _client(served).chat.completions.create(
        model=served.base,
        messages=[{"role": "user", "content": question}],
        temperature=0,
        max_tokens=32,
    )
    assert reply.choices[0].message.content != expected


def test_completions_endpoint_streams_text(served: Served) -> None:
    name, _ = served.adapters[RANKS[0]]
    chunks = list(
        _client(served).completions.create(
            model=name, prompt="Once upon a time", max_tokens=8, temperature=0, stream=True
        )
    )
    assert chunks and all(c.object == "text_completion" for c in chunks)
    assert "".join(c.choices[0].text for c in chunks if c.choices)


def test_models_lists_base_adapters_and_versions(served: Served) -> None:
    ids = {m.id for m in _client(served).models.list()}
    name, _ = served.adapters[RANKS[0]]
    assert {served.base, name, f"{name}@v1"} <= ids


def test_successful_inference_answers_200_like_openai(served: Served) -> None:
    import httpx

    response = httpx.post(
        f"{served.url}/v1/chat/completions",
        headers=served.headers(),
        timeout=60,
        json={
            "model": served.base,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
        },
    )
    assert response.status_code == 200
