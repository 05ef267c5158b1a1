"""Generation for eval runs: each item's chat request sent to the API as the tenant.

A run generates through the API's own `/v1/chat/completions` with a short-lived key of the
tenant that only has the `inference` scope, so quotas, rate limits, budgets, admission and
usage apply to eval traffic exactly as to the tenant's own. A 429 is waited out (its
Retry-After, capped); a server error or no answer is tried again a few times with a growing
pause, as OpenAI's own clients do (a 503 while an engine is briefly out of rotation must not
grade an item as failed), then the item is errored; any other refusal of the request itself
(unknown model, suspended tenant, a budget spent) ends the run with the API's own message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any

import httpx

from loraplex.evals.templates import render

log = logging.getLogger("loraplex.evals")

MAX_RATE_LIMIT_WAITS = 8
MAX_SERVER_ERROR_TRIES = 3
SERVER_ERROR_PAUSE_S = 0.5  # before the second try; doubled before each next one
MAX_RETRY_AFTER_S = 30.0
REQUEST_TIMEOUT_S = 300.0


class RunRefused(Exception):
    """The API refused the run's requests for a reason waiting will not fix."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True, slots=True)
class Sample:
    """What the model answered one item with (or the error in its place)."""

    messages: list[dict[str, str]]
    text: str = ""
    finish_reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: dict[str, str] | None = None


def request_body(data_source: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """The chat completion request for `item`: the template rendered (or, for OpenAI's
    `item_reference` input, the messages the item holds, as a canary's sample eval replays
    live prompts), with the sampling params."""
    given = data_source["input_messages"]
    if given["type"] == "item_reference":
        messages = referenced_messages(item, given["item_reference"])
    else:
        messages = [
            {"role": m["role"], "content": render(m["content"], {"item": item})}
            for m in given["template"]
        ]
    params = data_source.get("sampling_params") or {}
    body: dict[str, Any] = {"model": data_source["model"], "messages": messages}
    for name, sent_as in (
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("seed", "seed"),
        ("max_completion_tokens", "max_tokens"),
    ):
        if params.get(name) is not None:
            body[sent_as] = params[name]
    return body


def referenced_messages(item: dict[str, Any], reference: str) -> list[dict[str, Any]]:
    """The chat messages at `reference` (`item.input`) in the item, as they are."""
    value: Any = {"item": item}
    for key in reference.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    if not isinstance(value, list):
        return []  # the API refuses an empty conversation (a 400): the run fails saying so
    return [m for m in value if isinstance(m, dict)]


async def sample(client: httpx.AsyncClient, body: dict[str, Any]) -> Sample:
    """Send one item's request, waiting out rate limits and trying server errors again;
    raise RunRefused on a refusal."""
    waits = server_errors = 0
    while True:
        try:
            response = await client.post("/v1/chat/completions", json=body)
        except httpx.HTTPError as exc:  # logged here: the item's error names no host
            tries = f"{server_errors + 1} of {MAX_SERVER_ERROR_TRIES}"
            log.warning("eval request to %s failed (try %s): %r", client.base_url, tries, exc)
            response = None
        if response is None or response.status_code >= 500:
            server_errors += 1
            if server_errors >= MAX_SERVER_ERROR_TRIES:
                return Sample(body["messages"], error=_server_error(response))
            pause = SERVER_ERROR_PAUSE_S * 2 ** (server_errors - 1)
            await asyncio.sleep(_retry_after(response, pause) if response else pause)
            continue
        if response.status_code == 429:
            waits += 1
            if waits > MAX_RATE_LIMIT_WAITS:
                return Sample(
                    body["messages"],
                    error={
                        "code": "rate_limit_exceeded",
                        "message": "still rate limited after waiting",
                    },
                )
            await asyncio.sleep(_retry_after(response))
            continue
        if response.status_code >= 400:
            error = _error(response)
            raise RunRefused(error["code"], error["message"])
        return _parsed(body["messages"], response.json())


def _server_error(response: httpx.Response | None) -> dict[str, str]:
    if response is None:
        return {"code": "server_error", "message": "the API did not answer"}
    return _error(response)


def _parsed(messages: list[dict[str, str]], reply: dict[str, Any]) -> Sample:
    choice = (reply.get("choices") or [{}])[0]
    usage = reply.get("usage") or {}
    return Sample(
        messages,
        text=str((choice.get("message") or {}).get("content") or ""),
        finish_reason=str(choice.get("finish_reason") or ""),
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
    )


def _error(response: httpx.Response) -> dict[str, str]:
    """The API's own error (already safe for the tenant to read), code and message."""
    try:
        error = response.json().get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    return {
        "code": str(error.get("code") or f"http_{response.status_code}")[:100],
        "message": str(error.get("message") or "the request failed")[:500],
    }


def _retry_after(response: httpx.Response, default: float = 1.0) -> float:
    """The response's Retry-After in seconds (capped), else `default`."""
    try:
        said = float(response.headers.get("retry-after", default))
    except ValueError:
        return default
    return min(MAX_RETRY_AFTER_S, max(0.1, said))


def sample_context(item: dict[str, Any], result: Sample, model: str) -> dict[str, Any]:
    """What graders' templates see: `item` and `sample` (output_text, output_json, ...)."""
    sample_ns: dict[str, Any] = {
        "output_text": result.text,
        "model": model,
        "finish_reason": result.finish_reason,
    }
    with contextlib.suppress(ValueError):
        sample_ns["output_json"] = json.loads(result.text)
    return {"item": item, "sample": sample_ns}
