"""Engines behind `--api-key`: the launcher starts them with the key, and the drivers send it
as a bearer token on every call, probes and adapter loads included (docs/engines.md §2.5)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from loraplex.serving.engines import make_driver
from loraplex.serving.engines.launcher import (
    EngineConfig,
    EngineStartError,
    key_fingerprint,
    server_command,
    server_env,
    start_engine,
)
from loraplex.serving.registry import keyed_driver_factory
from tests.unit.engines.conftest import ENGINE_URL, FakeEngine

KEY = "engine-k3y"
MODELS = {"object": "list", "data": [{"id": "tiny", "object": "model", "parent": None}]}
METRICS = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 0.0\n"
LOADED = {"success": True, "error_message": None, "loaded_adapters": {"a1": "/tmp/a1"}}


def serve_everything(fake: FakeEngine) -> None:
    """Canned answers for the calls a driver makes outside generation."""
    fake.on("GET", "/health", httpx.Response(200))
    fake.on("GET", "/metrics", httpx.Response(200, text=METRICS))
    fake.on("GET", "/v1/models", httpx.Response(200, json=MODELS))
    fake.on("POST", "/load_lora_adapter", httpx.Response(200, json=LOADED))
    fake.on("POST", "/v1/load_lora_adapter", httpx.Response(200, text="ok"))


async def drive(kind: str, api_key: str | None) -> list[httpx.Request]:
    """Probe the fake engine, list its adapters and load one; the requests it got."""
    fake = FakeEngine()
    serve_everything(fake)
    driver = make_driver(kind, ENGINE_URL, api_key=api_key, client=fake.client())
    assert (await driver.health()).healthy
    await driver.metrics()
    await driver.list_loaded()
    await driver.load("a1", Path("/tmp/a1"))
    await driver.aclose()
    return fake.requests


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
async def test_every_engine_call_carries_the_key(kind: str) -> None:
    requests = await drive(kind, KEY)
    assert len(requests) >= 4
    assert {r.headers.get("authorization") for r in requests} == {f"Bearer {KEY}"}


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
async def test_without_a_key_no_authorization_is_sent(kind: str) -> None:
    requests = await drive(kind, None)
    assert all("authorization" not in r.headers for r in requests)


def test_the_registrys_drivers_carry_the_configured_key() -> None:
    driver = keyed_driver_factory(KEY)("sglang", ENGINE_URL)
    assert driver._client.headers["authorization"] == f"Bearer {KEY}"  # type: ignore[attr-defined]
    plain = keyed_driver_factory("")("vllm", ENGINE_URL)
    assert "authorization" not in plain._client.headers  # type: ignore[attr-defined]


def test_sglang_is_started_with_the_key() -> None:
    command = server_command(EngineConfig(kind="sglang", api_key=KEY))
    assert f"--api-key={KEY}" in command
    assert not any(a.startswith("--api-key") for a in server_command(EngineConfig(kind="sglang")))


def test_vllm_reads_the_key_from_its_environment_not_its_command_line() -> None:
    config = EngineConfig(kind="vllm", api_key=KEY)
    assert server_env(config, {})["VLLM_API_KEY"] == KEY
    assert KEY not in " ".join(server_command(config))
    assert "VLLM_API_KEY" not in server_env(EngineConfig(kind="vllm"), {})


def test_the_key_is_not_in_the_configs_repr_nor_in_the_engines_record() -> None:
    assert KEY not in repr(EngineConfig(api_key=KEY))
    assert KEY not in key_fingerprint(KEY) and key_fingerprint("") == ""


def test_an_engine_running_with_another_key_is_not_reused(tmp_path: Path) -> None:
    fake = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                             "sglang.launch_server"])  # fmt: skip
    try:
        for _ in range(100):  # until the child's command line is its own, not ours
            if b"sglang" in Path(f"/proc/{fake.pid}/cmdline").read_bytes():
                break
            time.sleep(0.02)
        config = EngineConfig(kind="sglang", state_dir=tmp_path, api_key=KEY)
        config.pid_file.write_text(str(fake.pid))
        config.info_file.write_text(json.dumps({
            "url": "http://127.0.0.1:1", "pid": fake.pid, "model_dir": "m",
            "served_model": "m", "log_file": "l", "kind": "sglang", "extra": {},
        }))  # fmt: skip
        with pytest.raises(EngineStartError, match="another API key"):
            start_engine(config)
    finally:
        fake.kill()
        fake.wait()


def test_a_key_starting_with_a_dash_reaches_the_engine_as_the_key() -> None:
    """argparse takes `--api-key -x` for a missing value and SGLang refuses to start; the key
    travels in the flag's own token instead, as SGLang's parser reads it."""
    command = server_command(EngineConfig(kind="sglang", api_key="-k3y"))
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-key")
    known, _ = parser.parse_known_args(command[3:])
    assert known.api_key == "-k3y"
