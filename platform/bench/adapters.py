"""`loraplex bench adapters`: many adapters live, the working set several times the slots.

The same open-loop trace (bench/adapters_trace.py: the simulator's Zipf workload with a hot
set that moves mid-run, a scanner's one-off adapters, short and long prompts) is served
four ways on six SGLang engines that are all up at once (an idle SGLang scheduler
sleeps) but never loaded at once: the trace is cut into `--windows` windows and the ways
take turns, window by window, in an order that rotates (adapters_replay.interleaved). On
this shared 2-core host a busy minute then falls on every way alike instead of deciding
the verdict; run one after another, two default runs once gave opposite verdicts.

1. **all resident** (the floor): the same arrivals and prompts on as many adapters as one
   engine has GPU slots, every one loaded up front — no adapter ever waits for a slot;
2. **plain**: two SGLang engines at `--max-lora-rank 64` with the same slots, every adapter
   loaded up front into host memory, SGLang's own LRU, behind a round-robin proxy;
3. **Loraplex**: the gateway, two SGLang engines of rank classes 16 and 64, adapters
   uploaded through the API into an S3 server (moto), placement and eviction as shipped
   (admission's shedding off: this measures adapter caching, not load shedding);
4. **all resident, gateway**: the floor's trace through the gateway onto two engines of
   its own (bench/adapters_gateway.py), its adapters loaded before each of its windows.
   The floor through the proxy pays nothing for the gateway's own path; against this
   one, Loraplex's row adds only placement's cost.

Capacity is a burst: `PROBE_REQUESTS` requests of the trace's mix, all sent at once to the
all-resident engines; completed requests over the seconds the burst took. The offered rate
starts at `--load` times that and is probed on the floor (`backed_off`): while the floor's
TTFT p50 is over `BUSY_X` its unloaded one (short requests one at a time), the rate goes
down. The table says how far above its unloaded TTFT the floor's p50 went in the windows.
Every way's sampled short answers are compared with PEFT's greedy answer for the same
adapter and question. Beside the live figures: the loads no policy can
go below on the same trace (bound per tier) and the simulator's prediction for it, on its
GPU cost profile. docs/many-adapters.md says how to read the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import click
import numpy as np

from loraplex.bench.adapters_faster import at_gpu_rates, faster_table
from loraplex.bench.adapters_gateway import CHAT, BenchGateway, start_gateway
from loraplex.bench.adapters_replay import Answer, Way, chat_body, interleaved, replay
from loraplex.bench.adapters_report import WayStats, table, way_stats
from loraplex.bench.adapters_setup import (
    EngineSlots,
    engines,
    gateway_loads,
    loads_between,
    make_adapters,
    peft_answers,
    register_everywhere,
    sampled,
)
from loraplex.bench.adapters_trace import (
    BenchRequest,
    LoadShape,
    is_scan,
    make_trace,
    resident_trace,
    tier_bounds,
)
from loraplex.bench.adapters_verdict import (
    FLOOR,
    FLOOR_GATEWAY,
    LORAPLEX,
    PLAIN,
    loraplex_nodes,
    plain_nodes,
    predicted,
    predicted_targets,
    targets,
)
from loraplex.bench.round_robin import round_robin_proxy
from loraplex.serving.engines.launcher import EngineConfig, ensure_model
from loraplex.serving.policy import NodeSpec
from loraplex.serving.simulator.workload import Workload
from loraplex.settings import Settings

PROBE_REQUESTS = 24
# The ways whose loads the gateway counts during their windows; the others (through the
# round-robin proxy) loaded every adapter into both engines before the clock started.
THROUGH_GATEWAY = (LORAPLEX, FLOOR_GATEWAY)
# The plain way's engines' ports: apart from the shared dev and test engines' (8100-8121)
# and the Loraplex way's (adapters_gateway.PORTS).
PORTS = {"a": 8141, "b": 8142}


@dataclass(frozen=True, slots=True)
class Run:
    """One table's load: its shape, the workload and the requests drawn from it."""

    shape: LoadShape
    workload: Workload
    trace: list[BenchRequest]


@dataclass(slots=True)
class Served:
    """One way's answers on one table, with what it loaded."""

    answers: list[Answer]
    wall_s: float
    loads: dict[str, int]
    warmed: dict[str, float]  # tier -> versions warmed at upload, before the windows


@click.command("adapters")
@click.option("--adapters", default=96, show_default=True, help="adapter versions made")
@click.option("--gpu-slots", default=4, show_default=True, help="--max-loras-per-batch")
@click.option(
    "--host-slots",
    default=48,
    show_default=True,
    help="--max-loaded-loras of each Loraplex engine (the plain way's hold every adapter)",
)
@click.option("--working-set", default=4.0, show_default=True, help="x the cluster's GPU slots")
@click.option("--scan-adapters", default=16, show_default=True, help="one-off adapters scanned")
@click.option("--seconds", default=60.0, show_default=True, help="length of the trace")
@click.option(
    "--load",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="starting offered rate, x the burst's capacity (backed off while the floor lags)",
)
@click.option("--max-tokens", default=16, show_default=True)
@click.option("--check-per-adapter", default=2, show_default=True, help="answers vs PEFT's")
@click.option("--windows", default=4, show_default=True, help="turns the ways take over each trace")
@click.option(
    "--second-table/--no-second-table", default=False, help="also 8x with the scan doubled"
)
@click.option("--seed", default=0, show_default=True)
@click.option("--workdir", type=click.Path(path_type=Path), default=Path("var/bench/adapters"))
@click.option(
    "--json", "json_path", type=click.Path(path_type=Path), default=Path("var/bench/adapters.json")
)
@click.pass_obj
def bench_adapters(
    settings: Settings,
    adapters: int,
    gpu_slots: int,
    host_slots: int,
    working_set: float,
    scan_adapters: int,
    seconds: float,
    load: float,
    max_tokens: int,
    check_per_adapter: int,
    windows: int,
    second_table: bool,
    seed: int,
    workdir: Path,
    json_path: Path,
) -> None:
    """Loraplex vs SGLang's own LRU behind round robin vs all resident, many adapters live."""
    base = LoadShape(
        slots=2 * gpu_slots, working_set=working_set, scan_adapters=scan_adapters,
        seconds=seconds, max_tokens=max_tokens, seed=seed,
    )  # fmt: skip
    shapes = [base]
    if second_table:
        shapes.append(replace(base, working_set=2 * working_set, scan_adapters=2 * scan_adapters))
    if max(s.adapters for s in shapes) > adapters:
        raise click.UsageError(
            f"the tables need {max(s.adapters for s in shapes)} adapters; --adapters is {adapters}"
        )
    model_dir = EngineConfig().model_dir
    ensure_model(model_dir, lambda line: click.echo(line, err=True))
    folders = make_adapters(model_dir, workdir / "adapters", adapters)
    calibration, runs, served = _serve_all(
        settings, shapes, folders, (gpu_slots, host_slots), load, windows, workdir
    )
    asked = {
        (a.adapter, a.question)
        for ways in served
        for way in ways.values()
        for a in sampled(way.answers, check_per_adapter)
    }
    peft = peft_answers(model_dir, folders, asked, max_tokens, workdir / "peft.json")
    record: dict[str, Any] = {
        "capacity_rps": calibration.capacity_rps,
        "capacity_probe": _probe_words(),
        "unloaded_ttft_ms": calibration.unloaded_ttft_ms,
        "rate_rps": calibration.rate_rps,
        "probes": [{"rate_rps": r, "floor_ttft_p50_ms": p} for r, p in calibration.probes],
        "floor_kept_up": calibration.kept_up,
        "windows": windows,
        "tables": [],
    }
    plain = plain_nodes(gpu_slots, adapters)
    nodes = {FLOOR: plain, PLAIN: plain, FLOOR_GATEWAY: loraplex_nodes(gpu_slots, host_slots)}
    nodes[LORAPLEX] = nodes[FLOOR_GATEWAY]
    for run, ways_served in zip(runs, served, strict=True):
        ways = [
            _stats(name, way, run, peft, check_per_adapter, nodes[name])
            for name, way in ways_served.items()
        ]
        printed = _print_table(run, calibration, ways, gpu_slots, host_slots, windows)
        record["tables"].append({**printed, "warmed_at_upload": ways_served[LORAPLEX].warmed})
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(record, indent=2, default=str))


def _probe_words() -> str:
    return (
        f"a burst of {PROBE_REQUESTS} requests of the trace's mix sent at once to the "
        "all-resident engines: completed requests / seconds the burst took"
    )


def _serve_all(
    settings: Settings,
    shapes: list[LoadShape],
    folders: list[Path],
    slots: tuple[int, int],
    load: float,
    window_count: int,
    root: Path,
) -> tuple[Calibration, list[Run], list[dict[str, Served]]]:
    """Every engine up at once (idle SGLang schedulers sleep), then each table's four ways
    replayed window by window in turn (`interleaved`): a minute of a busy host falls on all
    the ways, not on whichever ran then. Returns the calibration, the runs and, per run,
    each way's answers by its name."""
    gpu_slots, host_slots = slots
    with contextlib.ExitStack() as stack:
        plain_specs = [
            EngineSlots(f"plain-{x}", PORTS[x], 64, gpu_slots, len(folders)) for x in "ab"
        ]
        plain = stack.enter_context(engines(plain_specs, root))
        urls = [info.url for _, info in plain]
        served_model = plain[0][1].served_model
        register_everywhere(urls, [f"a{i}" for i in range(len(folders))], folders)
        proxy = stack.enter_context(round_robin_proxy(urls)) + CHAT

        def plain_send(request: BenchRequest) -> tuple[dict[str, str], dict[str, Any]]:
            body = chat_body(f"{served_model}:a{request.adapter}", request, shapes[0].max_tokens)
            return {}, {**body, "lora_path": f"a{request.adapter}"}

        gateway = start_gateway(stack, settings, gpu_slots, host_slots, root)
        calibration = _calibrate(proxy, plain_send, shapes[0], load, gpu_slots, gateway)
        runs = [_run(replace(s, rate_per_s=calibration.rate_rps)) for s in shapes]
        served = []
        for k, run in enumerate(runs):
            ours, ours_warmed = _loraplex(gateway, k, run, served_model, folders)
            ways = [
                Way(FLOOR, proxy, resident_trace(run.trace, gpu_slots), plain_send),
                Way(PLAIN, proxy, run.trace, plain_send),
                _floor_through(gateway, k, run, folders, gpu_slots),
                ours,
            ]
            warmed = {LORAPLEX: ours_warmed}
            replayed = asyncio.run(
                interleaved(
                    ways, window_count, run.shape.seconds, lambda: gateway_loads(gateway.url)
                )
            )
            up_front = {"host": 2 * len(folders)}  # every adapter into both engines, up front
            served.append({
                way.name: Served(
                    done.answers,
                    done.wall_s,
                    loads_between({}, done.grew) if way.name in THROUGH_GATEWAY else up_front,
                    warmed.get(way.name, {}),
                )
                for way, done in zip(ways, replayed, strict=True)
            })  # fmt: skip
    return calibration, runs, served


def _loraplex(
    gateway: BenchGateway, k: int, run: Run, base: str, folders: list[Path]
) -> tuple[Way, dict[str, float]]:
    """The Loraplex way: run `k`'s adapters uploaded under fresh names, placement as shipped.
    Also returns what placement warmed at upload, by tier, before the windows."""
    prefix = f"t{k}-a"
    warmed = gateway.upload(prefix, run.shape.adapters, run.workload, base, folders)
    click.echo(
        f"warmed at upload, before the windows: {warmed.get('disk', 0):.0f} onto disk, "
        f"{warmed.get('loaded', 0):.0f} into engine memory",
        err=True,
    )
    send = gateway.sender(prefix, run.workload, run.shape.max_tokens)
    return Way(LORAPLEX, gateway.url + CHAT, run.trace, send), warmed


def _floor_through(
    gateway: BenchGateway, k: int, run: Run, folders: list[Path], resident: int
) -> Way:
    """The floor's trace through the gateway, on engines like the Loraplex way's but its
    own: its `resident` adapters (as many as an engine has GPU slots, spread over the two)
    are each asked once before its windows, so none waits for a load while the clock runs.
    Against this floor, what the Loraplex row adds is placement's own cost, not the
    gateway's."""
    prefix = f"t{k}-f"
    copies = gateway.floor_copies(folders[:resident])
    gateway.upload(prefix, resident, run.workload, gateway.floor_model, copies)
    send = gateway.sender(prefix, run.workload, run.shape.max_tokens)
    trace = resident_trace(run.trace, resident)
    firsts: dict[int, BenchRequest] = {}
    for request in sorted(trace, key=lambda r: r.long):  # a short one where there is one
        firsts.setdefault(request.adapter, request)
    return Way(FLOOR_GATEWAY, gateway.url + CHAT, trace, send, tuple(firsts.values()))


@dataclass(frozen=True, slots=True)
class Calibration:
    """What the load is sized from, measured on the floor's engines before the tables."""

    capacity_rps: float  # the burst's completed requests per second
    unloaded_ttft_ms: float  # median TTFT of short requests sent one at a time
    rate_rps: float  # the offered rate: --load x capacity, backed off until the floor keeps up
    probes: tuple[tuple[float, float], ...]  # (rate/s, the floor's TTFT p50 ms) per probe
    kept_up: bool  # the floor kept up at rate_rps; False: PROBE_TRIES were all too busy


# The burst overstates what the host sustains open loop, and by how much changes from run
# to run (the same defaults gave 1.5 and 2.9 requests/s of capacity): before the tables, the
# floor gets `PROBE_S` of the trace at the offered rate (longer if that would be under
# `PROBE_MIN` requests); while its TTFT p50 is over `BUSY_X` its unloaded one, the host is
# overloaded and the rate goes down by `BACK_OFF`. Two halving steps rather than three of
# 0.7: the burst's figure was 2-4x what the floor kept up with on every run so far, and
# three probes took the default run past ten minutes (10 min 47 s, 2026-12-08).
PROBE_S = 15.0
PROBE_MIN = 16
BUSY_X = 2.0
BACK_OFF = 0.5
PROBE_TRIES = 2


def backed_off(rate: float, p50_ms: float, unloaded_ms: float) -> float | None:
    """The next rate to probe after one at `rate` gave the floor `p50_ms`; None when the
    floor kept up (within `BUSY_X` of its unloaded TTFT) and `rate` stands."""
    kept_up = math.isnan(unloaded_ms) or p50_ms <= BUSY_X * unloaded_ms  # NaN: no yardstick
    return None if kept_up else rate * BACK_OFF


def _calibrate(
    proxy: str, send: Any, shape: LoadShape, load: float, gpu_slots: int, gateway: BenchGateway
) -> Calibration:
    """Warm both paths up, measure the floor unloaded and at a burst, then find the rate
    the floor keeps up with (`backed_off`)."""
    probe = make_trace(replace(shape, rate_per_s=PROBE_REQUESTS / shape.seconds))[1]
    burst = [replace(r, at_s=0.0) for r in resident_trace(probe, gpu_slots)]
    asyncio.run(replay(proxy, burst[:4], send))  # warm-up: the first batches
    gateway.warm_up()
    alone: list[float] = []
    for request in [r for r in burst if not r.long][:4]:  # one at a time
        answers, _ = asyncio.run(replay(proxy, [request], send))
        alone.extend(a.ttft_s for a in answers if a.ok)
    answers, wall = asyncio.run(replay(proxy, burst[:PROBE_REQUESTS], send))
    capacity = sum(a.ok for a in answers) / wall
    unloaded = 1000 * float(np.median(alone)) if alone else float("nan")
    click.echo(f"capacity: {capacity:.2f} requests/s ({_probe_words()})", err=True)
    click.echo(
        f"unloaded TTFT p50 (floor, one short request at a time): {unloaded:.0f} ms", err=True
    )
    if capacity <= 0:
        raise click.ClickException(
            "the capacity burst completed no request: see the engines' logs under --workdir"
        )
    rate: float | None = load * capacity
    probes: list[tuple[float, float]] = []
    while rate is not None and len(probes) < PROBE_TRIES:
        seconds = max(PROBE_S, PROBE_MIN / rate)
        trace = make_trace(replace(shape, seconds=seconds, rate_per_s=rate, seed=shape.seed + 1))
        answers, _ = asyncio.run(replay(proxy, resident_trace(trace[1], gpu_slots), send))
        p50 = 1000 * float(np.median([a.ttft_s for a in answers if a.ok] or [math.inf]))
        probes.append((rate, p50))
        click.echo(f"probe at {rate:.2f} requests/s: the floor's TTFT p50 {p50:.0f} ms", err=True)
        rate = backed_off(rate, p50, unloaded)
    stands = probes[-1][0] if rate is None else rate  # the last rate probed, or one below
    return Calibration(capacity, unloaded, stands, tuple(probes), kept_up=rate is None)


def _rate_words(calibration: Calibration) -> str:
    probes = len(calibration.probes)
    if calibration.kept_up:
        return f"--load x capacity, backed off {probes - 1} time(s) until the floor kept up"
    return f"the floor lagged in all {probes} probes; this rate, one step lower, was not probed"


def _run(shape: LoadShape) -> Run:
    workload, trace = make_trace(shape)
    return Run(shape, workload, trace)


def _stats(
    name: str,
    served: Served,
    run: Run,
    peft: dict[tuple[int, str], str],
    per_adapter: int,
    nodes: list[NodeSpec],
) -> WayStats:
    """One way's row: its answers checked against PEFT's, its loads against the bound."""
    checked = sampled(served.answers, per_adapter)
    equal = sum(a.text == peft[(a.adapter, a.question)] for a in checked)
    # Over the completed requests: a refused one made no load, so it is not in the bound.
    completed = np.array([a.adapter for a in served.answers if a.ok], dtype=np.int64)
    bounds = asdict(tier_bounds(completed, nodes))
    return way_stats(
        name, served.answers, served.wall_s, lambda i: is_scan(run.workload, i),
        (equal, len(checked)), served.loads, bounds,
    )  # fmt: skip


def _print_table(
    run: Run,
    calibration: Calibration,
    ways: list[WayStats],
    gpu_slots: int,
    host_slots: int,
    window_count: int,
) -> dict[str, Any]:
    shape = run.shape
    click.echo(
        f"\nworking set {shape.working_set:g}x the {shape.slots} GPU slots: "
        f"{shape.regular_adapters} adapters (Zipf a={shape.alpha:g}, hot set moved at "
        f"{shape.seconds / 2:.0f} s) + {shape.scan_adapters} scanned once; "
        f"{len(run.trace)} requests in {shape.seconds:.0f} s at {shape.rate_per_s:.2f}/s "
        f"(capacity by the burst {calibration.capacity_rps:.2f}/s; {_rate_words(calibration)})"
        ", the ways taking turns in "
        f"{window_count} windows; {shape.max_tokens} tokens a reply; ms"
    )
    click.echo(table(ways))
    floor = next(w for w in ways if w.way == FLOOR)
    busy = floor.ttft_p50_ms / calibration.unloaded_ttft_ms
    click.echo(
        f"the floor's TTFT p50 is {busy:.1f}x its unloaded {calibration.unloaded_ttft_ms:.0f} ms"
        + (
            f" (over {BUSY_X:g}x: the host was busier in the windows than in the probe)"
            if busy > BUSY_X
            else ""
        )
    )
    sim = predicted(run.workload, gpu_slots, host_slots)
    for row in sim.values():
        click.echo(
            f"simulator, same trace, GPU cost profile — {row['policy']}: TTFT p50 "
            f"{1000 * row['ttft_p50_s']:.0f} ms, p99 {1000 * row['ttft_p99_s']:.0f} ms; cold "
            f"loads {row['cold_loads']} (bound {row['cold_load_bound']}), host loads "
            f"{row['host_loads']}, GPU swaps {row['gpu_swaps']}"
        )
    verdicts = targets(ways)
    for line in [*verdicts, *predicted_targets(sim)]:
        click.echo(line)
    faster = at_gpu_rates(run.shape, gpu_slots, host_slots)
    click.echo(faster_table(faster))
    return {
        "shape": asdict(shape),
        "ways": [w.row() for w in ways],
        "simulator": [
            {k: v for k, v in r.items() if not isinstance(v, dict)} for r in sim.values()
        ],
        "targets": verdicts,
        "simulator_targets": predicted_targets(sim),
        "simulator_faster": faster,
    }
