"""Helpers for the OpenAI-surface tests: one request sent two ways, and replies made comparable.

`Direct.engine` sends a body straight to the engine with the engine-side model name (the
served base model, or `lpx-<version id>` for an adapter version, which the gateway's own
request just placed there); `Direct.gateway` sends it through Loraplex with the tenant's
name. `comparable` keeps what a user reads (text, tool calls, logprobs, finish, usage) and
drops what differs by design (ids, timestamps, the echoed model name).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import httpx

from loraplex.serving.loader import engine_adapter_name
from tests.integration.conftest import FILES, Served
from tests.support.trained import trained_adapter

LOGPROB_DIGITS = 4  # the engine's float32 logprobs, printed by two JSON encoders


@dataclass(frozen=True)
class Direct:
    """One served view, reachable through the gateway and straight at its engine."""

    served: Served

    def gateway(self, path: str, model: str, body: dict[str, Any]) -> dict[str, Any]:
        """The gateway's reply to `body` sent for `model` (the tenant's name)."""
        response = httpx.post(
            f"{self.served.url}{path}",
            json={**body, "model": model},
            headers=self.served.headers(),
            timeout=120,
        )
        assert response.status_code == 200, response.text
        return response.json()

    def engine(self, path: str, model: str, body: dict[str, Any]) -> dict[str, Any]:
        """The engine's own reply to `body`, with `model` turned into its engine-side name."""
        payload = {k: v for k, v in body.items() if k not in ("metadata", "store")}
        response = httpx.post(
            f"{self.served.engine.url}{path}",
            json={**payload, "model": self.engine_name(model)},
            timeout=120,
        )
        assert response.status_code == 200, response.text
        return response.json()

    def engine_name(self, model: str) -> str:
        """The name the engine knows `model` by (the adapter's newest version)."""
        if model == self.served.base:
            return self.served.engine.served_model
        versions = httpx.get(
            f"{self.served.url}/api/v1/tenants/{self.served.tenant_id}/adapters/{model}/versions",
            headers=self.served.headers(),
            timeout=30,
        ).json()["items"]
        return engine_adapter_name(UUID(versions[0]["id"]))


def direct_for(served: Served) -> Direct:
    """`Direct` for a view."""
    return Direct(served)


def comparable(reply: dict[str, Any]) -> dict[str, Any]:
    """What a user of `reply` reads, without ids, timestamps or the model name."""
    return {
        "choices": sorted(
            (_choice(choice) for choice in reply["choices"]), key=lambda c: c["index"]
        ),
        "usage": {k: reply["usage"][k] for k in ("prompt_tokens", "completion_tokens")},
    }


def _choice(choice: dict[str, Any]) -> dict[str, Any]:
    message = choice.get("message") or {}
    calls = [
        (call["function"]["name"], json.loads(call["function"]["arguments"] or "null"))
        for call in message.get("tool_calls") or []
    ]
    return {
        "index": choice["index"],
        "finish_reason": choice["finish_reason"],
        # A reply of only tool calls has null content at OpenAI; engines also send "".
        "text": (message.get("content") or (None if calls else ""))
        if "message" in choice
        else choice.get("text"),
        "tool_calls": calls,
        "logprobs": _rounded(choice.get("logprobs")),
    }


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, LOGPROB_DIGITS)
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items() if k != "bytes"}
    return value


TOOLS_SEED = 0


def tool_adapter(served: Served, platform: Any) -> tuple[str, list[dict], list[tuple[str, dict]]]:
    """The tenant's tool-calling adapter on this view: its name, its tools, and its examples
    as (question, {"name", "arguments"}) pairs.

    Trained once per session (as `make-adapter --task tools` does; one training serves
    both engine kinds, tests/support/trained.py) and uploaded like any adapter.
    """
    from loraplex.dev.corpus import task_examples, tool_definitions, tool_examples

    name = f"tools-{served.kind}"
    folder = platform.root / name
    if not folder.exists():
        pairs, tools = task_examples("tools", TOOLS_SEED)
        trained_adapter(
            served.engine.model_dir,
            folder,
            rank=8,
            seed=TOOLS_SEED,
            examples=pairs,
            tools=tools,
            base_name=served.base,
        )
    adapters = f"{served.url}/api/v1/tenants/{served.tenant_id}/adapters"
    with httpx.Client(headers=served.headers(), timeout=60) as http:
        if http.get(f"{adapters}/{name}").status_code == 404:
            http.post(adapters, json={"name": name, "base_model": served.base})
            files = [("file", (n, (folder / n).read_bytes())) for n in FILES]
            response = http.post(f"{adapters}/{name}/versions", files=files)
            assert response.status_code == 201, response.text
    examples = [
        (e.question, {"name": e.name, "arguments": e.arguments}) for e in tool_examples(TOOLS_SEED)
    ]
    return name, tool_definitions(), examples
