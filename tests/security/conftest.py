"""The hostile-tenant suite's platform: one live API process, a stand-in engine, tenants A and B.

Tenant A (free plan) attacks; tenant B (pro plan) streams from the stand-in engine in a
process of its own (`probe.py`) and times its pauses. Each case measures B alone first and
then B during the attack, in the same run, so the bound cancels the host's speed: B's
longest pause during an attack may be at most `PAUSE_FACTOR` times its longest alone.

The engine is the drills' stand-in (tests/system/fake_engine.py, vLLM's routes on plain
asyncio): a real engine would spend both cores on decoding, and what is measured here is the
API process, whose every stream shares one event loop.

The platform runs with the least privilege issue #43 asks for: the engines ask for an API key
(as vLLM's `--api-key` does) and the API sends it; the API reaches Redis as an ACL user of its
own with a password, without the admin commands (CONFIG, ACL, CLIENT KILL, ...); tenant A
also has a console session, for the console's routes. Both are made here, so `make test`
needs nothing more than the PostgreSQL and Redis that `make services` starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import pytest
import redis

from loraplex.adapters.facts import facts_to_json, read_base_model_facts
from loraplex.bench.server import api_process
from loraplex.serving.engines.launcher import ensure_model
from loraplex.settings import Settings
from tests.integration.conftest import wait_in_rotation
from tests.security.report import Measured, Outcome, Row, SuiteReport
from tests.support.lora_files import TINY_BASE, write_adapter
from tests.support.stand_in_engine import stand_in_engine
from tests.support.tenants import Tenant

REPO = Path(__file__).resolve().parents[2]
PAUSE_FACTOR = 3.0
# B's pause alone is never taken below 50 ms, so a pause under 150 ms under attack always
# passes. On this 2-core host the attacker's client, the password pool and B's probe share
# the cores: a CI run saw B pause 74 ms during 200 sign-in guesses against 21 ms alone, which
# is the host's jitter, not a stall a reader notices. The attacks this suite guards against
# stalled B for seconds (12 s for one header), far above the bound either way.
ALONE_FLOOR_S = 0.050
RSS_GROWTH_LIMIT = 64 * 2**20
WINDOW_S = 2.0  # B streams at least this long, alone and under attack
REPORT = SuiteReport()
# The generated model `loraplex up` and the engines use: its tokenizer makes the gateway count
# prompt tokens, which the stand-in base model (no tokenizer) skips.
COUNTED_MODEL = "loraplex-tiny"
COUNTED_MODEL_DIR = REPO / "var" / "models" / COUNTED_MODEL


@dataclass
class Target:
    """The live platform the cases attack."""

    url: str
    pid: int
    ops: dict[str, str]
    a: Tenant
    b: Tenant
    model: str
    data_dir: Path
    counted_model: str = ""  # a base model whose tokenizer the gateway counts prompts with
    engine_url: str = ""  # the stand-in engine B streams from, which asks for `engine_key`
    engine_key: str = ""
    redis_url: str = ""  # the API's: its own ACL user and password
    console: dict[str, str] = field(default_factory=dict)  # A's console session cookies

    def console_headers(self) -> dict[str, str]:
        """What htmx sends with a console form: its marker and the CSRF token."""
        return {"hx-request": "true", "x-csrftoken": self.console.get("csrftoken", "")}

    def peak_rss(self) -> int:
        """The API process's peak resident memory so far (VmHWM), in bytes."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM")

    def stored(self) -> int:
        """How many things tenant A has stored: adapters, their versions and aliases, files,
        leftover uploads, API keys, users, budgets, fine-tuning jobs, evals and their runs."""
        tenant = f"/api/v1/tenants/{self.a.id}"

        def count(http: httpx.Client, path: str) -> int:
            answer = http.get(path)  # a route an older checkout lacks counts nothing
            if answer.status_code != 200:
                return 0
            found = answer.json()
            if isinstance(found, list):
                return len(found)
            if "total" in found:
                return int(found["total"])
            return len(found.get("data") or found.get("items") or [])

        with httpx.Client(base_url=self.url, headers=self.a.headers, timeout=30) as http:
            adapters = http.get(f"{tenant}/adapters?limit=100").json()
            names = [quote(item["name"], safe="") for item in adapters["items"]]
            base = f"{tenant}/adapters"
            versions = sum(count(http, f"{base}/{n}/versions") for n in names)
            aliases = sum(count(http, f"{base}/{n}/aliases") for n in names)
            files = len(http.get("/v1/files").json()["data"])
            rows = count(http, f"{tenant}/api-keys?limit=100") + count(http, f"{tenant}/users")
            rows += count(http, f"{tenant}/budgets") + count(http, "/v1/fine_tuning/jobs?limit=100")
            evals = http.get("/v1/evals?limit=100")
            eval_ids = [e["id"] for e in evals.json()["data"]] if evals.status_code == 200 else []
            rows += len(eval_ids) + sum(
                count(http, f"/v1/evals/{e}/runs?limit=100") for e in eval_ids
            )
        uploads = self.data_dir / "uploads"
        leftovers = len(list(uploads.iterdir())) if uploads.exists() else 0
        return len(names) + versions + aliases + files + rows + leftovers

    def serves(self) -> bool:
        """Whether the process answers a health check and a request of B's."""
        try:
            healthy = httpx.get(f"{self.url}/healthz", timeout=10).status_code == 200
            body = {"model": self.model, "messages": [{"role": "user", "content": "tokens=3"}]}
            answer = httpx.post(
                f"{self.url}/v1/chat/completions", json=body, headers=self.b.headers, timeout=30
            )
        except httpx.HTTPError:
            return False
        return healthy and answer.status_code == 200

    @contextlib.contextmanager
    def b_streaming(self) -> Iterator[Callable[[], dict[str, Any]]]:
        """Tenant B streams in its own process until the returned function stops it."""
        probe = subprocess.Popen(
            [sys.executable, "-m", "tests.security.probe", self.url, self.b.key, self.model],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert probe.stdout is not None and probe.stdin is not None
        try:
            assert probe.stdout.readline().strip() == "ready", "B's stream never started"

            def stop() -> dict[str, Any]:
                probe.stdin.close()  # type: ignore[union-attr]
                line = probe.stdout.readline()  # type: ignore[union-attr]
                probe.wait(30)
                return dict(json.loads(line))

            yield stop
        finally:
            if probe.poll() is None:
                probe.kill()
                probe.wait()

    def b_alone(self, window_s: float) -> float:
        """B's longest pause over `window_s` with nothing else going on."""
        with self.b_streaming() as stop:
            time.sleep(window_s)
            return float(stop()["longest_pause_s"])

    def measure(self, case: str, attack_class: str, attack: Callable[[], Outcome]) -> Measured:
        """B while `attack` runs, then B alone for as long; the figures, also added to the
        suite's table. The longest of more pauses is longer: both windows are equally long."""
        rss, stored = self.peak_rss(), self.stored()
        with self.b_streaming() as stop:
            started = time.monotonic()
            outcome = attack()
            time.sleep(max(0.3, WINDOW_S - (time.monotonic() - started)))
            attacked = float(stop()["longest_pause_s"])
            window = time.monotonic() - started
        rss_growth, stored_after, serves = self.peak_rss() - rss, self.stored(), self.serves()
        alone = self.b_alone(window)
        measured = Measured(outcome, alone, attacked, rss_growth, stored, stored_after, serves)
        REPORT.add(Row.of(case, attack_class, measured))
        return measured


def check(measured: Measured, *, names: tuple[str, ...] = ()) -> None:
    """The suite's assertions, in the order a user would notice them."""
    assert measured.serves_after, "the API stopped serving after the attack"
    refusals = [s for s in measured.outcome.statuses if s >= 400]
    assert all(400 <= s < 500 for s in refusals), measured.outcome.statuses
    if names:
        assert refusals, f"the attack was not refused: {measured.outcome.statuses}"
        text = " ".join(measured.outcome.messages).lower()
        assert any(n.lower() in text for n in names), measured.outcome.messages[:2]
    assert measured.stored_after == measured.stored_before, "the attack left something stored"
    assert measured.rss_growth < RSS_GROWTH_LIMIT, f"peak RSS grew {measured.rss_growth >> 20} MiB"
    assert measured.attacked_s <= PAUSE_FACTOR * max(measured.alone_s, ALONE_FLOOR_S), (
        f"B paused {measured.attacked_s * 1000:.0f} ms under attack, "
        f"{measured.alone_s * 1000:.0f} ms alone"
    )


def check_each(measured: Measured, names: list[tuple[str, ...]]) -> None:
    """`check`, and every request of the attack refused with a 4xx whose message names its
    own problem: `names[i]` lists the words one of which the i-th message must hold."""
    statuses, messages = measured.outcome.statuses, measured.outcome.messages
    assert len(statuses) == len(names) == len(messages), statuses
    wrong = [
        f"request {i}: {status}, wanted a 4xx naming one of {words}: {message[:300]}"
        for i, (status, message, words) in enumerate(zip(statuses, messages, names, strict=True))
        if not 400 <= status < 500 or not any(w.lower() in message.lower() for w in words)
    ]
    assert not wrong, "\n".join(wrong)
    check(measured)


def _register(url: str, ops: dict[str, str], base: dict[str, Any]) -> None:
    response = httpx.post(f"{url}/api/v1/base-models", json=base, headers=ops, timeout=30)
    assert response.status_code in (201, 409), response.text


def _engine(url: str, ops: dict[str, str], engine_url: str, model: str) -> str:
    engine = {
        "name": f"sec-{secrets.token_hex(2)}", "url": engine_url, "kind": "vllm",
        "base_model": model, "max_lora_rank": 64, "gpu_slots": 4, "host_slots": 8,
    }  # fmt: skip
    return str(_post(url, ops, "/api/v1/engines", engine)["id"])


def _post(url: str, ops: dict[str, str], path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{url}{path}", json=body, headers=ops, timeout=60)
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


def _tenant(url: str, ops: dict[str, str], plan: str) -> Tenant:
    slug = f"sec-{plan}-{secrets.token_hex(3)}"
    made = _post(url, ops, "/api/v1/tenants", {"slug": slug, "name": slug, "plan": plan})
    scopes = ["admin", "inference", "fine-tune"]
    key = _post(url, ops, f"/api/v1/tenants/{made['id']}/api-keys", {"name": "k", "scopes": scopes})
    return Tenant(made["id"], key["key"])


def suite_settings(
    settings: Settings, data_dir: Path, engine_key: str = "", redis_url: str = ""
) -> Settings:
    """The production limits (uploads of 512 MB), not the integration suite's small ones; a
    knob an older checkout lacks is left out, so the suite also runs on it for comparison."""
    defaults = Settings()
    wanted = {
        "data_dir": data_dir,
        "max_upload_bytes": defaults.max_upload_bytes,
        "max_training_file_bytes": defaults.max_training_file_bytes,
        "login_attempts_per_minute": defaults.login_attempts_per_minute,
        "event_loop_lag_warn_s": 0.05,  # the API log then shows each stall a case caused
        "engine_api_key": engine_key,
        "redis_url": redis_url or settings.redis_url,
    }
    return replace(settings, **{k: v for k, v in wanted.items() if hasattr(settings, k)})


@contextlib.contextmanager
def redis_user(server_url: str) -> Iterator[str]:
    """A Redis ACL user of its own for the API, with a password and without the admin
    commands, made through `server_url` (the default user `make services` leaves open for
    the other suites) and removed after; the API's Redis URL."""
    name, password = f"loraplex-sec-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
    admin = redis.Redis.from_url(server_url)
    admin.execute_command(
        "ACL", "SETUSER", name, "reset", "on", f">{password}", "~*", "&*", "+@all", "-@admin"
    )
    parts = urlsplit(server_url)
    netloc = f"{name}:{password}@{parts.hostname}:{parts.port or 6379}"
    try:
        yield urlunsplit(parts._replace(netloc=netloc))
    finally:
        admin.execute_command("ACL", "DELUSER", name)
        admin.close()


def _console_session(url: str, ops: dict[str, str], tenant: Tenant) -> dict[str, str]:
    """A tenant admin of `tenant`, signed in to the console: the session's cookies. Made
    before any case runs: the password-guessing case slows sign-ins from this address."""
    email, password = f"sec-{secrets.token_hex(3)}@example.com", secrets.token_urlsafe(16)
    user = {"email": email, "password": password, "role": "tenant_admin"}
    _post(url, ops, f"/api/v1/tenants/{tenant.id}/users", user)
    with httpx.Client(base_url=url, timeout=30) as http:
        assert http.get("/login").status_code == 200
        form = {"email": email, "password": password, "_csrf_token": http.cookies["csrftoken"]}
        signed_in = http.post("/login", data=form)
        assert signed_in.status_code == 303, signed_in.text
        return dict(http.cookies.items())


@pytest.fixture(scope="session")
def target(
    settings: Settings, operator_key: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    """The live API process with tenants A and B and the stand-in engine in its rotation."""
    data_dir = tmp_path_factory.mktemp("security-data")
    ops = {"Authorization": f"Bearer {operator_key}"}
    model = TINY_BASE.name
    ensure_model(COUNTED_MODEL_DIR, say=lambda _: None)
    key = f"engine-{secrets.token_urlsafe(16)}"
    with (
        redis_user(settings.redis_url) as redis_url,
        stand_in_engine(model, api_key=key) as engine_url,
        stand_in_engine(COUNTED_MODEL, api_key=key) as counted_url,
        api_process(suite_settings(settings, data_dir, key, redis_url).to_env()) as (url, pid),
    ):
        _register(url, ops, {**facts_to_json(TINY_BASE), "source": "generated://tiny-llama"})
        counted = read_base_model_facts(COUNTED_MODEL_DIR, COUNTED_MODEL)
        _register(url, ops, {**facts_to_json(counted), "source": str(COUNTED_MODEL_DIR)})
        engines = [
            _engine(url, ops, engine_url, model),
            _engine(url, ops, counted_url, COUNTED_MODEL),
        ]
        wait_in_rotation(url, ops, engines)
        a, b = _tenant(url, ops, "free"), _tenant(url, ops, "pro")
        found = Target(url, pid, ops, a, b, model, data_dir, COUNTED_MODEL, engine_url, key,
                       redis_url, _console_session(url, ops, a))  # fmt: skip
        _warm_up(found, tmp_path_factory.mktemp("warm"))
        yield found


def _warm_up(target: Target, folder: Path) -> None:
    """One valid upload by A, so the check workers have started before anything is timed;
    and the adapter every upload case sends its versions to."""
    write_adapter(folder)
    with httpx.Client(base_url=target.url, headers=target.a.headers, timeout=120) as http:
        adapters = f"/api/v1/tenants/{target.a.id}/adapters"
        for name in ("warm", "target"):
            made = http.post(adapters, json={"name": name, "base_model": target.model})
            assert made.status_code == 201, made.text
        files = [("file", (n, (folder / n).read_bytes())) for n in ("adapter_config.json",
                 "adapter_model.safetensors")]  # fmt: skip
        uploaded = http.post(f"{adapters}/warm/versions", files=files)
        assert uploaded.status_code == 201, uploaded.text


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The suite's table, after the run."""
    if REPORT.rows:
        terminalreporter.write_line("\n[security] hostile tenant A against tenant B's stream")
        for line in REPORT.table().splitlines():
            terminalreporter.write_line(line)
        out = os.environ.get("LORAPLEX_SECURITY_REPORT")
        if out:
            Path(out).write_text(json.dumps(REPORT.as_json(), indent=1))
