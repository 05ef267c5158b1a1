"""An eval item's request: a server error that passes is tried again, one that stays is the
item's error, a refusal ends the run (platform/evals/generate.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from loraplex.evals import generate
from loraplex.evals.generate import RunRefused, Sample, sample

BODY = {"model": "m@v1", "messages": [{"role": "user", "content": "hi"}]}
ANSWER = {"choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}]}
UNAVAILABLE = {"error": {"code": "engine_unavailable", "message": "no engine can serve it"}}


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generate, "SERVER_ERROR_PAUSE_S", 0.0)
    monkeypatch.setattr(generate, "MAX_RETRY_AFTER_S", 0.0)


def _sampled(answers: list[Callable[[], httpx.Response]]) -> tuple[Sample, int]:
    """What `sample` returns against an API answering `answers` in turn; (it, requests)."""
    sent = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answers[min(len(sent), len(answers)) - 1]()

    async def go() -> Sample:
        transport = httpx.MockTransport(answer)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            return await sample(client, BODY)

    return asyncio.run(go()), len(sent)


def _unavailable() -> httpx.Response:
    return httpx.Response(503, json=UNAVAILABLE, headers={"retry-after": "0"})


def _unreachable() -> httpx.Response:
    raise httpx.ConnectError("refused")


def test_a_server_error_that_passes_is_tried_again_and_the_item_answered() -> None:
    result, sent = _sampled([_unavailable, _unreachable, lambda: httpx.Response(200, json=ANSWER)])
    assert (result.error, result.text, sent) == (None, "hello", 3)


def test_a_server_error_that_stays_is_the_items_error_after_three_tries() -> None:
    result, sent = _sampled([_unavailable])
    assert result.error == {"code": "engine_unavailable", "message": "no engine can serve it"}
    assert sent == generate.MAX_SERVER_ERROR_TRIES == 3


def test_an_api_that_does_not_answer_is_the_items_error() -> None:
    result, _ = _sampled([_unreachable])
    assert result.error == {"code": "server_error", "message": "the API did not answer"}


def test_a_refusal_ends_the_run_with_the_apis_message() -> None:
    refusal = {"error": {"code": "model_not_found", "message": "no adapter m"}}
    with pytest.raises(RunRefused, match="no adapter m"):
        _sampled([lambda: httpx.Response(404, json=refusal)])
