"""Live placement on a real engine (SGLang and vLLM) with few host slots.

A second engine (1 GPU slot, 2 host slots) serves its own base-model name, so the shared
engine is untouched. More distinct adapters than fit are served in round-robin, random and
concurrent order; the engine never holds more than its host slots, a pinned adapter stays
loaded throughout, and every request answers 200 with its own adapter's output.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from loraplex.adapters.facts import facts_to_json, read_base_model_facts
from loraplex.serving.engines.launcher import EngineConfig, start_engine, stop_engine
from tests.integration.conftest import Served

pytestmark = pytest.mark.engine


@pytest.fixture
def served(served_each: Served) -> Served:
    """Every test here runs on each engine kind (SGLang, vLLM)."""
    return served_each


FEW_BASE = "loraplex-tiny-few"
HOST_SLOTS = 2
ADAPTERS = 5
FILES = ("adapter_config.json", "adapter_model.safetensors")


@dataclass(frozen=True)
class FewEngine:
    """The few-slot engine as the API knows it."""

    engine_id: str
    adapters: dict[str, str]  # adapter name -> version id


@dataclass
class Watch:
    """What the engine's adapter list showed while the test ran."""

    most: int = 0
    pinned_missing: int = 0
    looks: int = 0
    misses: list[str] = field(default_factory=list)  # looks that got no list, and why
    stop: threading.Event = field(default_factory=threading.Event)
    first: threading.Event = field(default_factory=threading.Event)  # one look was made


@pytest.fixture
def few_engine(served: Served, tmp_path: Path) -> Iterator[FewEngine]:
    config = EngineConfig(
        kind=served.kind,
        model_dir=served.engine.model_dir,
        port={"sglang": 8102, "vllm": 8112}[served.kind],
        state_dir=Path(f"var/engine-few-{served.kind}"),
        max_loras=1,
        max_cpu_loras=HOST_SLOTS,
    )
    start_engine(config, say=lambda line: print(f"[few engine] {line}"))
    ops = served.operator()
    facts = {
        **facts_to_json(read_base_model_facts(served.engine.model_dir)),
        "name": FEW_BASE,
        "source": str(served.engine.model_dir),
    }
    httpx.post(f"{served.url}/api/v1/base-models", json=facts, headers=ops)
    engine = httpx.post(
        f"{served.url}/api/v1/engines",
        headers=ops,
        json={
            "name": f"few-{secrets.token_hex(3)}",
            "url": config.url,
            "kind": served.kind,
            "base_model": FEW_BASE,
            "max_lora_rank": 64,
            "gpu_slots": 1,
            "host_slots": HOST_SLOTS,
        },
    ).json()
    try:
        _wait_in_rotation(served, engine["id"])
        yield FewEngine(engine["id"], _upload_random_adapters(served, tmp_path))
    finally:
        httpx.delete(f"{served.url}/api/v1/engines/{engine['id']}", headers=ops)
        stop_engine(config, grace_s=5)


def _upload_random_adapters(served: Served, root: Path) -> dict[str, str]:
    from loraplex.dev.make_adapter import make_adapter

    versions = {}
    with httpx.Client(base_url=served.url, headers=served.headers(), timeout=60) as http:
        for i in range(ADAPTERS):
            name = f"few-{secrets.token_hex(3)}-{i}"
            folder = make_adapter(
                served.engine.model_dir, root / name, rank=8, seed=i, random=True,
                base_name=FEW_BASE,
            )  # fmt: skip
            tenant = f"/api/v1/tenants/{served.tenant_id}/adapters"
            http.post(tenant, json={"name": name, "base_model": FEW_BASE})
            files = [("file", (n, (folder / n).read_bytes())) for n in FILES]
            response = http.post(f"{tenant}/{name}/versions", files=files)
            assert response.status_code == 201, response.text
            versions[name] = response.json()["id"]
    return versions


def _wait_in_rotation(served: Served, engine_id: str) -> None:
    for _ in range(120):
        url = f"{served.url}/api/v1/engines/{engine_id}"
        live = httpx.get(url, headers=served.operator()).json().get("live")
        if live and live["in_rotation"]:
            return
        time.sleep(0.5)
    raise AssertionError("the few-slot engine never came into rotation")


def _ask(http: httpx.Client, model: str) -> tuple[int, str]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Name a colour"}],
        "max_tokens": 6,
        "temperature": 0,
    }
    response = http.post("/v1/chat/completions", json=body)
    if response.status_code != 200:
        return response.status_code, response.text
    return 200, response.json()["choices"][0]["message"]["content"]


def _watch(served: Served, few: FewEngine, pinned_name: str, watch: Watch) -> None:
    url = f"{served.url}/api/v1/engines/{few.engine_id}/adapters"
    with httpx.Client(headers=served.operator(), timeout=30) as http:
        while not watch.stop.is_set():
            try:  # a slow or failed look is recorded, not allowed to end the watch
                response = http.get(url)
                response.raise_for_status()
                names = [a["name"] for a in response.json()["adapters"]]
            except httpx.HTTPError as error:
                watch.misses.append(repr(error))
                time.sleep(0.1)
                continue
            finally:
                watch.first.set()
            watch.looks += 1
            watch.most = max(watch.most, len(names))
            watch.pinned_missing += pinned_name not in names
            time.sleep(0.1)


def test_more_adapters_than_host_slots_serve_correctly_with_a_pinned_one_kept(
    served: Served, few_engine: FewEngine
) -> None:
    names = list(few_engine.adapters)
    pinned = names[0]
    ops, pinned_version = served.operator(), few_engine.adapters[pinned]
    pin = httpx.put(f"{served.url}/api/v1/placement/pins/{pinned_version}", headers=ops)
    assert pin.status_code == 200, pin.text
    with httpx.Client(base_url=served.url, headers=served.headers(), timeout=120) as http:
        first = {name: _ask(http, name) for name in names}
        assert all(status == 200 for status, _ in first.values()), first
        assert len({text for _, text in first.values()}) > 1  # the adapters differ
        pinned_engine_name = "lpx-" + pinned_version.replace("-", "")
        watch = Watch()
        watcher = threading.Thread(
            target=_watch, args=(served, few_engine, pinned_engine_name, watch), daemon=True
        )
        watcher.start()
        try:
            # In one CI run every request below ended before the watcher's first look (a
            # busy machine starved its thread): the requests start once it has looked.
            assert watch.first.wait(60), "the watcher never got an answer to its first look"
            order = names * 2 + random.Random(5).choices(names, k=12)
            answers = [(name, _ask(http, name)) for name in order]
            with ThreadPoolExecutor(3) as pool:
                mixed = random.Random(7).choices(names, k=12)
                answers += list(zip(mixed, pool.map(lambda n: _ask(http, n), mixed), strict=True))
        finally:
            watch.stop.set()
            watcher.join()
    wrong = [(name, got) for name, got in answers if got != first[name]]
    assert not wrong, f"requests failed or answered with another adapter: {wrong}"
    assert watch.looks > 0 and watch.most <= HOST_SLOTS, watch
    assert watch.pinned_missing == 0, watch
    placement = httpx.get(f"{served.url}/api/v1/placement", headers=ops).json()
    assert placement["unloads"] > 0  # evictions did happen: 5 adapters, 2 host slots
    [engine] = [e for e in placement["engines"] if e["engine_id"] == few_engine.engine_id]
    assert engine["host_slots_used"] <= HOST_SLOTS
