"""A soak across both API hosts: many tenants and adapters under Zipf popularity, streams and
whole answers, users who leave mid-stream, slow readers, and one tenant far over its quota.

What a user and the operator would check afterwards:
- no 5xx (the only refusals are the over-quota tenant's 429s);
- every tenant's usage in PostgreSQL equals the tokens its clients received, counted
  exactly, the streams whose users left included;
- no concurrency lease left in Redis;
- each API process's resident memory and open file descriptors flat: growth within
  `RSS_GROWTH_BOUND` and `FD_GROWTH_BOUND` after a warm-up round;
- neither agent's adapter cache above its budget (or, when they alone take more, the folders
  its engine holds and so pins) by more than the downloads then in flight.

`LORAPLEX_SOAK_S` sets the length (default 120 s: `make test` time is budgeted).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tests.support.hygiene import leaks
from tests.system import report
from tests.system.adapters import make_adapters
from tests.system.cluster import AGENT_CACHE_BYTES, API_HOSTS, FAKE_MODEL, REDIS_PORT, Cluster
from tests.system.conftest import Tenant, make_tenant, usage_totals
from tests.system.drills import CHAT_PATH, wait_until
from tests.system.engine_streams import outcome, tokens_received

SOAK_S = float(os.environ.get("LORAPLEX_SOAK_S", "120"))
IN_FLIGHT = 10  # requests the clients keep open at once
TENANTS, ADAPTERS_EACH = 6, 2
ZIPF_S = 1.1  # popularity of tenants and of models: weight 1 / rank^s
HEAVY_SHARE = 0.15  # of requests, sent by the tenant over its quota
HEAVY_RPM = 20  # that tenant's requests per minute
LEAVE_SHARE, SLOW_SHARE, STREAM_SHARE = 0.10, 0.05, 0.7
LEAVE_AFTER = 3  # events a leaving user reads before closing the connection
# Bounds on each API process over the soak, after a warm-up round.
RSS_GROWTH_BOUND = 48 * 2**20
FD_GROWTH_BOUND = 16


@dataclass
class Sent:
    """One request of the soak and what its client saw."""

    tenant: Tenant
    kind: str  # "whole" | "stream" | "leaves" | "slow"
    future: Future[dict[str, Any]]
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> int | None:
        """The HTTP status (200 for a stream that started)."""
        return self.result.get("status")

    @property
    def received(self) -> int:
        """Completion tokens the client received (the stand-ins send one word per token)."""
        if self.status != 200:
            return 0
        if self.kind == "whole":
            body = json.loads(self.result["text"])
            return sum(len((c["message"]["content"] or "").split()) for c in body["choices"])
        return tokens_received(self.result)


def zipf(count: int) -> list[float]:
    """Weights 1/rank^s for ranks 1..count."""
    return [1 / rank**ZIPF_S for rank in range(1, count + 1)]


def process_figures(pid: int) -> tuple[int, int]:
    """(resident bytes, open file descriptors) of a process."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
    return rss_kb * 1024, len(os.listdir(f"/proc/{pid}/fd"))


def cache_bytes(folder: Path) -> int:
    """Bytes of adapter files under `folder`, removals in progress left out."""
    if not folder.exists():
        return 0
    total = 0
    for path in folder.rglob("*"):
        if ".trash" in path.relative_to(folder).parts:  # renamed away, deleted in background
            continue
        with contextlib.suppress(FileNotFoundError):  # evicted while walking
            total += path.stat().st_size if path.is_file() else 0
    return total


def engine_holds(cluster: Cluster, host: str) -> set[str]:
    """The cache folders the stand-in engine on `host` has loaded adapters from."""
    reply = cluster.client.request("GET", f"{cluster.engine_url(host)}/v1/models", timeout=2.0)
    if reply.get("status") != 200:
        return set()
    cards = json.loads(reply["text"])["data"]
    return {Path(card["root"]).name for card in cards if card.get("parent")}


def downloads_in_flight(folder: Path) -> int:
    """Versions the agent is downloading now (each in its own folder under .incoming)."""
    with contextlib.suppress(FileNotFoundError):
        return len(os.listdir(folder / ".incoming"))
    return 0


class CacheWatch:
    """Samples both agents' caches every 0.2 s: per cache, the largest size seen and the
    largest size over its allowance per download then in flight. The allowance is the
    budget, or the versions the engine holds when they alone take more: while an engine
    holds a version its folder is pinned (the engine may re-read it), and a pinned folder
    is never evicted (platform/serving/disk_cache.py)."""

    def __init__(self, folders: dict[Path, Callable[[], set[str]]], budget: int) -> None:
        self.folders, self.budget = folders, budget
        self.largest = dict.fromkeys(map(str, folders), 0)
        # Per cache, the most bytes over the allowance seen, over (1 + downloads in flight).
        self.overshoot_per_download = dict.fromkeys(map(str, folders), 0.0)
        self.most_held = 0  # the most adapter folders one engine held at a sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for folder, held in self.folders.items():
                # A download may start or land while the folder is read: count those in
                # flight before and after, the larger of the two.
                before = downloads_in_flight(folder)
                holds = held()
                self.most_held = max(self.most_held, len(holds))
                pinned = sum(cache_bytes(folder / name) for name in holds)
                key, size = str(folder), cache_bytes(folder)
                downloading = max(before, downloads_in_flight(folder))
                self.largest[key] = max(self.largest[key], size)
                over = (size - max(self.budget, pinned)) / (1 + downloading)
                self.overshoot_per_download[key] = max(self.overshoot_per_download[key], over)

    def stop(self) -> dict[str, int]:
        """Stop sampling; the largest size of each cache."""
        self._stop.set()
        self._thread.join()
        return self.largest


def leases_left(cluster: Cluster) -> int:
    """Concurrency leases still held in Redis, over every tenant."""
    namespace = cluster.network.hosts["data"].namespace
    cli = ["ip", "netns", "exec", namespace, "redis-cli", "-h", cluster.data_ip]
    cli += ["-p", str(REDIS_PORT)]
    keys = subprocess.run(
        [*cli, "--scan", "--pattern", "*:leases:*"], capture_output=True, text=True, check=True
    ).stdout.split()
    held = 0
    for key in keys:
        answer = subprocess.run([*cli, "zcard", key], capture_output=True, text=True, check=True)
        held += int(answer.stdout.strip() or 0)
    return held


def request_body(rng: random.Random, model: str, kind: str) -> dict[str, Any]:
    """A chat request paced for the stand-ins: `tokens=N every=S` in the prompt."""
    if kind == "leaves":  # slow tokens: the user is gone before the next one is made
        content = "tokens=20 every=0.5"
    elif kind == "slow":
        content = f"tokens={rng.randint(20, 40)} every=0.01"
    else:
        content = f"tokens={rng.randint(3, 30)} every=0.02"
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 64,
    }
    if kind != "whole":
        body["stream"] = True
    return body


def send(cluster: Cluster, rng: random.Random, tenant: Tenant, model: str, host: str) -> Sent:
    """Start one request of a kind drawn at random."""
    assert cluster.client is not None
    draw = rng.random()
    if draw >= STREAM_SHARE:
        kind = "whole"
    elif draw < LEAVE_SHARE:
        kind = "leaves"
    elif draw < LEAVE_SHARE + SLOW_SHARE:
        kind = "slow"
    else:
        kind = "stream"
    command: dict[str, Any] = {
        "op": "request" if kind == "whole" else "stream",
        "method": "POST",
        "url": cluster.api_url(host) + CHAT_PATH,
        "headers": tenant.headers,
        "json": request_body(rng, model, kind),
        "timeout": 60,
    }
    if kind == "leaves":
        command["disconnect_after"] = LEAVE_AFTER
    if kind == "slow":
        command["read_delay_s"] = 0.1
    return Sent(tenant, kind, cluster.client.submit(command))


def test_a_soak_across_both_api_hosts_bills_exactly_and_leaks_nothing(
    cluster: Cluster, engines: dict[str, str], tmp_path: Path
) -> None:
    rng = random.Random(18)
    tenants = [make_tenant(cluster) for _ in range(TENANTS)]
    heavy = make_tenant(cluster, overrides={"requests_per_minute": HEAVY_RPM})
    models: list[tuple[Tenant, str]] = []
    for tenant in tenants:
        names = make_adapters(cluster, tenant, ADAPTERS_EACH, tmp_path, prefix="soak")
        models += [(tenant, name) for name in names] + [(tenant, FAKE_MODEL)]
    model_weights = zipf(len(models))
    rng.shuffle(models)  # popularity does not follow tenant order

    # Warm-up: every model once, so what is measured is steady state, not first loads.
    warm = [send(cluster, rng, tenant, model, API_HOSTS[i % 2]) for i, (tenant, model) in
            enumerate(models)]  # fmt: skip
    for sent in warm:
        sent.result = sent.future.result(60)
    pids = {host: cluster.services[host].pid for host in API_HOSTS}
    before = {host: process_figures(pid) for host, pid in pids.items()}
    watch = CacheWatch(
        {cluster.agent_cache(host): partial(engine_holds, cluster, host) for host in engines},
        AGENT_CACHE_BYTES,
    )

    sent_all: list[Sent] = list(warm)
    in_flight: list[Sent] = []
    deadline, n = time.monotonic() + SOAK_S, 0
    while time.monotonic() < deadline:
        in_flight = [s for s in in_flight if not _settle(s)]
        while len(in_flight) < IN_FLIGHT:
            host = API_HOSTS[n % 2]
            n += 1
            if rng.random() < HEAVY_SHARE:
                sent = send(cluster, rng, heavy, FAKE_MODEL, host)
            else:
                tenant, model = rng.choices(models, model_weights)[0]
                sent = send(cluster, rng, tenant, model, host)
            in_flight.append(sent)
            sent_all.append(sent)
        time.sleep(0.02)
    for sent in in_flight:
        sent.result = sent.future.result(90)
    # Each request gives its leases back as it ends. Checked at once: one never given back
    # would stay for the lease time (LORAPLEX_CONCURRENCY_LEASE_S, 5 s here) after its
    # last renewal, and the soak's last seconds end many requests.
    left_s = wait_until(lambda: leases_left(cluster) == 0, 3, 0.2, what="all leases given back")
    largest = watch.stop()
    time.sleep(2)  # let the last cleanups (usage records) run
    after = {host: process_figures(pid) for host, pid in pids.items()}

    # What the clients saw: no 5xx; only the heavy tenant refused, and only with 429.
    statuses = Counter((s.tenant is heavy, s.status) for s in sent_all)
    assert not [s.result for s in sent_all if (s.status or 500) >= 500], statuses
    assert {status for (is_heavy, status) in statuses if not is_heavy} == {200}, statuses
    assert {status for (is_heavy, status) in statuses if is_heavy} <= {200, 429}, statuses
    assert statuses[(True, 429)] > 0, "the heavy tenant was never held to its quota"
    refusals = [s.result for s in sent_all if s.status == 429]
    assert not [leaks(r.get("text", "")) for r in refusals if leaks(r.get("text", ""))]
    # Every stream ended as its client wanted: completed, or left by its user.
    streams = [s for s in sent_all if s.kind != "whole" and s.status == 200]
    unfinished = [
        s.result for s in streams if s.kind != "leaves" and outcome(s.result) != "completed"
    ]
    assert not unfinished, unfinished[:3]

    # Billing: per tenant, what PostgreSQL holds equals what the clients received.
    billed: dict[str, tuple[int, int, int, int]] = {}
    for tenant in [*tenants, heavy]:
        mine = [s for s in sent_all if s.tenant is tenant and s.status == 200]
        received = sum(s.received for s in mine)
        wait_until(lambda t=tenant, k=len(mine): usage_totals(cluster, t)["requests"] >= k, 30, 0.5)  # type: ignore[misc]
        stored = usage_totals(cluster, tenant)
        billed[tenant.id] = (len(mine), stored["requests"], received, stored["completion_tokens"])
    wrong = {t: b for t, b in billed.items() if b[0] != b[1] or b[2] != b[3]}
    assert not wrong, f"(requests sent, stored, tokens received, billed) differ: {wrong}"

    for host in API_HOSTS:
        (rss0, fd0), (rss1, fd1) = before[host], after[host]
        assert rss1 - rss0 <= RSS_GROWTH_BOUND, (host, rss0, rss1)
        assert fd1 - fd0 <= FD_GROWTH_BOUND, (host, fd0, fd1)
    # A download is written beside the cache (.incoming) and lands once the LRU has evicted
    # its victims (platform/serving/disk_cache.py); downloads of different versions run at
    # once: the cache may hold, over its allowance (the budget, or the folders its engine
    # holds and so pins, when they alone take more), one adapter per download in flight,
    # never more. Landing before eviction is pinned down by a unit test
    # (tests/unit/serving/test_disk_cache.py); this checks the agents live.
    one_adapter = max(cache_bytes(tmp_path / name) for _, name in models if name != FAKE_MODEL)
    overshoot = watch.overshoot_per_download
    assert watch.most_held > 0, "the engines' loaded adapters were never read"
    assert max(overshoot.values()) <= one_adapter, (largest, overshoot, one_adapter)

    kinds = Counter(s.kind for s in sent_all)
    total_received = sum(b[2] for b in billed.values())
    total_billed = sum(b[3] for b in billed.values())
    mib = 2**20
    report.record(
        f"soak {SOAK_S:.0f}s, {len(sent_all)} requests over 2 API hosts",
        f"{statuses[(False, 200)] + statuses[(True, 200)]} x 200, {statuses[(True, 429)]} x 429 "
        f"(heavy tenant only), 0 x 5xx; kinds {dict(kinds)}",
        f"{total_billed} completion tokens billed = {total_received} received over "
        f"{len(billed)} tenants; no lease left {left_s:.1f}s after the last request",
        "; ".join(
            f"{h}: RSS {before[h][0] / mib:.0f}->{after[h][0] / mib:.0f} MiB, "
            f"fds {before[h][1]}->{after[h][1]}"
            for h in API_HOSTS
        )
        + f"; agent caches at most {max(largest.values()) / mib:.2f} of "
        f"{AGENT_CACHE_BYTES / mib:.2f} MiB (an engine held up to {watch.most_held} adapters)",
    )


def _settle(sent: Sent) -> bool:
    """Whether the request has ended (its result taken in)."""
    if not sent.future.done():
        return False
    sent.result = sent.future.result()
    return True
