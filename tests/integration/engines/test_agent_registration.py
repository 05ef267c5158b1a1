"""Engines that register themselves: `loraplex agent --register-with` against the real API and
a real vLLM CPU engine of its own (restarted here, so the shared engines stay up).

The API process here has the shared agent token and short heartbeat limits; the agents do not
have the token: each registers with a node credential minted for its engine's name and a
secret of its own, which the API sends back when it loads adapters through it. The engine
serves a base model only this module uses, so every request for it goes through an agent's
engine.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from openai import OpenAI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.adapters.facts import facts_to_json, read_base_model_facts
from loraplex.auth.agent_token import open_agent_secret
from loraplex.bench.server import api_process, free_port
from loraplex.db.models import Engine
from loraplex.dev.corpus import adapter_examples
from loraplex.serving.engines.launcher import EngineConfig, start_engine, stop_engine
from loraplex.settings import Settings
from tests.integration.finetune.conftest import Process

pytestmark = pytest.mark.engine
TOKEN = secrets.token_hex(16)  # the API's shared agent token: the agents here do not take it
SECRET_KEY = secrets.token_urlsafe(32)  # the API's, which seals the agents' secrets
BASE = "loraplex-tiny-agent"
SEED = 21
FILES = ("adapter_config.json", "adapter_model.safetensors")


@pytest.fixture(scope="module")
def api(gateway_settings: Settings) -> Iterator[str]:
    """An API process that takes agent registrations, with quick heartbeat limits."""
    settings = replace(
        gateway_settings,
        agent_token=TOKEN,
        secret_key=SECRET_KEY,
        agent_heartbeat_s=0.5,
        agent_stale_after_s=3.0,
        agent_forget_after_s=8.0,
    )
    with api_process(settings.to_env()) as (url, _pid):
        yield url


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineConfig]:
    """This module's own vLLM engine (it gets restarted)."""
    config = EngineConfig(kind="vllm", port=8121, state_dir=Path("var/engine-agent-vllm"))
    start_engine(config, say=lambda line: print(f"[agent engine] {line}"))
    yield config
    stop_engine(config)


@pytest.fixture(scope="module")
def tenant(api: str, operator_key: str, engine: EngineConfig, tmp_path_factory) -> dict:
    """A tenant with a trained adapter on this module's base model, and its key."""
    from loraplex.dev.make_adapter import make_adapter

    ops = {"Authorization": f"Bearer {operator_key}"}
    facts = facts_to_json(read_base_model_facts(engine.model_dir))
    body = {**facts, "name": BASE, "source": str(engine.model_dir)}
    assert httpx.post(f"{api}/api/v1/base-models", json=body, headers=ops).status_code in (201, 409)
    slug = f"agents-{secrets.token_hex(3)}"
    made = httpx.post(f"{api}/api/v1/tenants", json={"slug": slug, "name": slug, "plan": "pro"},
                      headers=ops).json()  # fmt: skip
    key = httpx.post(f"{api}/api/v1/tenants/{made['id']}/api-keys", headers=ops,
                     json={"name": "k", "scopes": ["admin", "inference"]}).json()["key"]  # fmt: skip
    folder = tmp_path_factory.mktemp("agent-adapter")
    make_adapter(engine.model_dir, folder, rank=8, seed=SEED, base_name=BASE)
    headers = {"Authorization": f"Bearer {key}"}
    adapters = f"{api}/api/v1/tenants/{made['id']}/adapters"
    httpx.post(adapters, json={"name": "agentbot", "base_model": BASE}, headers=headers)
    files = [("file", (n, (folder / n).read_bytes())) for n in FILES]
    uploaded = httpx.post(f"{adapters}/agentbot/versions", files=files, headers=headers, timeout=60)
    assert uploaded.status_code == 201, uploaded.text
    return {"key": key, "id": made["id"]}


def mint_credential(api: str, operator_key: str, name: str) -> str:
    """A node credential for engine `name`, as an operator mints it."""
    minted = httpx.post(f"{api}/api/v1/node-credentials", json={"engine_name": name},
                        headers={"Authorization": f"Bearer {operator_key}"})  # fmt: skip
    assert minted.status_code == 201, minted.text
    return str(minted.json()["credential"])


def start_agent(
    api: str, engine: EngineConfig, name: str, gateway_settings: Settings, operator_key: str
) -> Process:
    """`loraplex agent --register-with` beside the engine, as a deployment of this release
    runs it: no shared agent token, only its own secret."""
    port = free_port()
    env = {**gateway_settings.to_env(), "LORAPLEX_AGENT_TOKEN": "",
           "LORAPLEX_NODE_CREDENTIAL": mint_credential(api, operator_key, name)}  # fmt: skip
    env["LORAPLEX_DATA_DIR"] = str(Path(gateway_settings.data_dir) / f"agent-{name}")
    args = ["agent", "--engine-url", engine.url, "--engine-kind", "vllm", "--port", str(port),
            "--register-with", api, "--name", name, "--base-model", BASE,
            "--gpu-slots", "4", "--host-slots", "8"]  # fmt: skip
    agent = Process(args, env).start()
    agent.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return agent


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 60) -> float:
    """Seconds until `check()` holds; fails naming `what` after `timeout_s`."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, f"{what} after {timeout_s}s"
        time.sleep(0.2)
    return time.monotonic() - started


def engine_named(api: str, operator_key: str, name: str) -> dict | None:
    """The API's view of the engine called `name`, or None when it has none."""
    ops = {"Authorization": f"Bearer {operator_key}"}
    items = httpx.get(f"{api}/api/v1/engines", params={"limit": 500}, headers=ops).json()["items"]
    return next((e for e in items if e["name"] == name), None)


def in_rotation(api: str, operator_key: str, name: str) -> bool:
    """Whether the API would send requests to it now."""
    found = engine_named(api, operator_key, name)
    return bool(found and found["live"] and found["live"]["in_rotation"])


def engine_holds_an_adapter(engine: EngineConfig) -> bool:
    """Whether the engine lists any adapter (its models besides the base)."""
    try:
        models = httpx.get(f"{engine.url}/v1/models", timeout=2).json()["data"]
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    return any(m.get("parent") for m in models)


def test_an_agent_registers_its_engine_and_requests_are_served_there(
    api: str, engine: EngineConfig, tenant: dict, operator_key: str, gateway_settings: Settings
) -> None:
    name = f"agent-{secrets.token_hex(3)}"
    agent = start_agent(api, engine, name, gateway_settings, operator_key)
    try:
        wait_for("the engine in rotation", lambda: in_rotation(api, operator_key, name))
        registered = engine_named(api, operator_key, name)
        assert registered["agent_url"] == agent.url and registered["agent_seen_at"]  # type: ignore[index]
        assert httpx.get(f"{agent.url}/readyz").status_code == 200
        client = OpenAI(base_url=f"{api}/v1", api_key=tenant["key"], max_retries=0)
        question, answer = adapter_examples(SEED)[0]
        reply = client.chat.completions.create(
            model="agentbot", messages=[{"role": "user", "content": question}],
            temperature=0, max_tokens=16,
        )  # fmt: skip
        assert reply.choices[0].message.content == answer

        # The engine restarts: it comes back empty, and placement loads the adapter again
        # because the agent said so, with no request asking for it.
        stop_engine(engine)
        start_engine(engine, say=lambda line: print(f"[agent engine] {line}"))
        restored_s = wait_for("the adapter re-loaded", lambda: engine_holds_an_adapter(engine), 90)
        print(f"\nadapter back on the restarted engine {restored_s:.1f}s after it answered")
    finally:
        agent.stop()
    # A clean shutdown deregisters: gone now, not when the heartbeat goes stale.
    wait_for("the engine deregistered", lambda: engine_named(api, operator_key, name) is None, 5)


def test_a_silent_agent_takes_its_engine_out_of_rotation_then_it_is_forgotten(
    api: str, engine: EngineConfig, operator_key: str, gateway_settings: Settings
) -> None:
    name = f"agent-{secrets.token_hex(3)}"
    agent = start_agent(api, engine, name, gateway_settings, operator_key)
    wait_for("the engine in rotation", lambda: in_rotation(api, operator_key, name))
    agent.kill()  # SIGKILL: no deregistration, the heartbeats just stop
    out_s = wait_for("out of rotation", lambda: not in_rotation(api, operator_key, name), 15)
    assert engine_named(api, operator_key, name) is not None  # still known, within grace
    gone_s = wait_for("forgotten", lambda: engine_named(api, operator_key, name) is None, 20)
    print(f"\nsilent agent: out of rotation after {out_s:.1f}s, forgotten {gone_s:.1f}s later")


async def test_an_agent_refuses_the_secret_of_another_agent(
    api: str,
    engine: EngineConfig,
    operator_key: str,
    gateway_settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Node A taken over knows its agent's secret (read here from the API's table, where it
    is sealed): node B's agent refuses it, and the API's shared token too."""
    names = [f"agent-{secrets.token_hex(3)}" for _ in range(2)]
    agents = [start_agent(api, engine, name, gateway_settings, operator_key) for name in names]
    try:
        for name in names:
            wait_for(
                f"{name} registered", lambda n=name: engine_named(api, operator_key, n) is not None
            )
        async with sessions() as session:
            found = select(Engine.name, Engine.agent_secret_sealed).where(Engine.name.in_(names))
            sealed = dict((await session.execute(found)).tuples().all())
        secret_a, secret_b = (open_agent_secret(SECRET_KEY, name, sealed[name]) for name in names)
        assert secret_a and secret_b and secret_a != secret_b
        assert secret_a not in str(sealed[names[0]])  # sealed at rest
        a, b = agents

        def answer(agent: Process, method: str, path: str, token: str) -> int:
            url = f"{agent.url}{path}"  # type: ignore[attr-defined]
            body = {"name": "lpx-x"} if method == "POST" else None
            headers = {"Authorization": f"Bearer {token}"}
            return httpx.request(method, url, json=body, headers=headers).status_code

        for method, path in (("GET", "/adapters"), ("POST", "/unload")):
            assert answer(b, method, path, secret_a) == 401, path  # A's secret at B
            assert answer(b, method, path, TOKEN) == 401, path  # the shared token, unset there
            assert answer(a, method, path, secret_b) == 401, path
        assert answer(b, "GET", "/adapters", secret_b) == 200  # each takes its own
        assert answer(a, "GET", "/adapters", secret_a) == 200
    finally:
        for agent in agents:
            agent.stop()


def test_agent_registration_needs_a_node_credential(api: str) -> None:
    body = {"url": "http://127.0.0.1:1", "kind": "vllm", "base_model": BASE,
            "agent_url": "http://127.0.0.1:2"}  # fmt: skip
    path = f"{api}/api/v1/agents/engines/intruder"
    assert httpx.put(path, json=body).status_code == 401
    wrong = httpx.put(path, json=body, headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401
    # The API's agent token goes to agents; it registers nothing.
    shared = httpx.put(path, json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert shared.status_code == 401


def test_an_agent_cannot_take_over_an_operators_engine(
    api: str, operator_key: str, engine: EngineConfig
) -> None:
    ops = {"Authorization": f"Bearer {operator_key}"}
    name = f"manual-{secrets.token_hex(3)}"
    manual = {"name": name, "url": engine.url, "kind": "vllm", "base_model": BASE}
    assert httpx.post(f"{api}/api/v1/engines", json=manual, headers=ops).status_code == 201
    body = {"url": "http://127.0.0.1:1", "kind": "vllm", "base_model": BASE,
            "agent_url": "http://127.0.0.1:2"}  # fmt: skip
    credential = mint_credential(api, operator_key, name)
    taken = httpx.put(f"{api}/api/v1/agents/engines/{name}", json=body,
                      headers={"Authorization": f"Bearer {credential}"})  # fmt: skip
    assert taken.status_code == 409 and "operator" in taken.json()["detail"]
    engine_id = engine_named(api, operator_key, name)["id"]  # type: ignore[index]
    httpx.delete(f"{api}/api/v1/engines/{engine_id}", headers=ops)
