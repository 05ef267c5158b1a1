"""`loraplex bench adapters`: many adapters live, the working set several times the slots.

The same open-loop trace (bench/adapters_trace.py: the simulator's Zipf workload with a hot
set that moves mid-run, a scanner's one-off adapters, short and long prompts) is served
three ways, one after another on this 2-core machine (two SGLang engines per way is what
fits; four at once would share two cores and measure each other):

1. **all resident** (the floor): the same arrivals and prompts on as many adapters as one
   engine has GPU slots, every one loaded up front — no adapter ever waits for a slot;
2. **plain**: two SGLang engines at `--max-lora-rank 64` with the same slots, every adapter
   loaded up front into host memory, SGLang's own LRU, behind a round-robin proxy;
3. **Loraplex**: the gateway, two SGLang engines of rank classes 16 and 64, adapters
   uploaded through the API into an S3 server (moto), placement and eviction as shipped
   (admission's shedding off: this measures adapter caching, not load shedding).

Capacity is a burst: `PROBE_REQUESTS` requests of the trace's mix, all sent at once to the
all-resident engines; completed requests over the seconds the burst took. The trace's rate
is `--load` times that. Every way's sampled short answers are compared with PEFT's greedy
answer for the same adapter and question. Beside the live figures: the loads no policy can
go below on the same trace (bound per tier) and the simulator's prediction for it, on its
GPU cost profile. docs/many-adapters.md says how to read the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import click
import numpy as np

from loraplex.bench.adapters_replay import Answer, chat_body, replay
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
    upload_adapters,
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
    LORAPLEX,
    PLAIN,
    loraplex_nodes,
    plain_nodes,
    predicted,
    targets,
)
from loraplex.bench.api import operator_key
from loraplex.bench.gateway import _setup
from loraplex.bench.overload import UNLIMITED
from loraplex.bench.round_robin import round_robin_proxy
from loraplex.bench.server import api_process, without_shedding
from loraplex.bench.tenants import new_tenant
from loraplex.bench.upload import moto_server, s3_env
from loraplex.serving.engines.launcher import EngineConfig, ensure_model
from loraplex.serving.policy import NodeSpec
from loraplex.serving.simulator.workload import Workload
from loraplex.settings import Settings

PROBE_REQUESTS = 24
# The engines' ports: apart from the shared dev and test engines' (8100-8121).
PORTS = {"a": 8141, "b": 8142, "r16": 8143, "r64": 8144}
CHAT = "/v1/chat/completions"


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


@click.command("adapters")
@click.option("--adapters", default=96, show_default=True, help="adapter versions made")
@click.option("--gpu-slots", default=4, show_default=True, help="--max-loras-per-batch")
@click.option("--host-slots", default=8, show_default=True, help="--max-loaded-loras (Loraplex)")
@click.option("--working-set", default=4.0, show_default=True, help="x the cluster's GPU slots")
@click.option("--scan-adapters", default=16, show_default=True, help="one-off adapters scanned")
@click.option("--seconds", default=45.0, show_default=True, help="length of the trace")
@click.option("--load", default=0.5, show_default=True, help="offered rate, x capacity")
@click.option("--max-tokens", default=16, show_default=True)
@click.option("--check-per-adapter", default=2, show_default=True, help="answers vs PEFT's")
@click.option("--second-table/--no-second-table", default=True, help="8x and the scan doubled")
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
    capacity, runs, floor, plain = _plain_and_floor(shapes, folders, gpu_slots, load, workdir)
    live = _loraplex(settings, runs, folders, gpu_slots, host_slots, workdir)
    asked = {
        (a.adapter, a.question)
        for way in (*floor, *plain, *live)
        for a in sampled(way.answers, check_per_adapter)
    }
    peft = peft_answers(model_dir, folders, asked, max_tokens, workdir / "peft.json")
    record: dict[str, Any] = {"capacity_rps": capacity, "capacity_probe": _probe_words()}
    record["tables"] = []
    for k, run in enumerate(runs):
        nodes = {
            FLOOR: plain_nodes(gpu_slots, adapters),
            PLAIN: plain_nodes(gpu_slots, adapters),
            LORAPLEX: loraplex_nodes(gpu_slots, host_slots),
        }
        ways = [
            _stats(name, served, run, peft, check_per_adapter, nodes[name])
            for name, served in ((FLOOR, floor[k]), (PLAIN, plain[k]), (LORAPLEX, live[k]))
        ]
        record["tables"].append(_print_table(run, capacity, ways, gpu_slots, host_slots))
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(record, indent=2, default=str))


def _probe_words() -> str:
    return (
        f"a burst of {PROBE_REQUESTS} requests of the trace's mix sent at once to the "
        "all-resident engines: completed requests / seconds the burst took"
    )


def _plain_and_floor(
    shapes: list[LoadShape], folders: list[Path], gpu_slots: int, load: float, root: Path
) -> tuple[float, list[Run], list[Served], list[Served]]:
    """Capacity, the runs at `load` x capacity, and the floor's and the plain way's answers,
    on two rank-64 engines holding every adapter, behind the round-robin proxy."""
    specs = [EngineSlots(f"plain-{x}", PORTS[x], 64, gpu_slots, len(folders)) for x in "ab"]
    names = [f"a{i}" for i in range(len(folders))]
    with engines(specs, root) as started:
        urls = [info.url for _, info in started]
        served_model = started[0][1].served_model
        register_everywhere(urls, names, folders)

        def send(request: BenchRequest) -> tuple[dict[str, str], dict[str, Any]]:
            body = chat_body(f"{served_model}:a{request.adapter}", request, shapes[0].max_tokens)
            return {}, {**body, "lora_path": f"a{request.adapter}"}

        with round_robin_proxy(urls) as proxy:
            probe = make_trace(replace(shapes[0], rate_per_s=PROBE_REQUESTS / shapes[0].seconds))[1]
            burst = [replace(r, at_s=0.0) for r in resident_trace(probe, gpu_slots)]
            asyncio.run(replay(proxy + CHAT, burst[:4], send))  # warm-up: first batches
            answers, wall = asyncio.run(replay(proxy + CHAT, burst[:PROBE_REQUESTS], send))
            capacity = sum(a.ok for a in answers) / wall
            click.echo(f"capacity: {capacity:.2f} requests/s ({_probe_words()})", err=True)
            runs = [_run(replace(s, rate_per_s=load * capacity)) for s in shapes]
            floor, plain = [], []
            for run in runs:
                floor.append(_served(proxy, resident_trace(run.trace, gpu_slots), send))
                plain.append(_served(proxy, run.trace, send))
                for way in (floor[-1], plain[-1]):
                    way.loads = {"host": 2 * len(folders)}  # every adapter, up front
    return capacity, runs, floor, plain


def _run(shape: LoadShape) -> Run:
    workload, trace = make_trace(shape)
    return Run(shape, workload, trace)


def _served(url: str, trace: list[BenchRequest], send: Any) -> Served:
    answers, wall = asyncio.run(replay(url + CHAT, trace, send))
    return Served(answers, wall, {})


def _loraplex(
    settings: Settings,
    runs: list[Run],
    folders: list[Path],
    gpu_slots: int,
    host_slots: int,
    root: Path,
) -> list[Served]:
    """Each run through the gateway on rank classes 16 and 64, adapters from S3 (moto)."""
    operator = operator_key(settings)
    specs = [
        EngineSlots("loraplex-r16", PORTS["r16"], 16, gpu_slots, host_slots),
        EngineSlots("loraplex-r64", PORTS["r64"], 64, gpu_slots, host_slots),
    ]
    out = []
    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(moto_server())
        env = {
            **without_shedding(settings).to_env(),
            **s3_env(endpoint, f"bench-{secrets.token_hex(3)}"),
            "LORAPLEX_DATA_DIR": str(root / "api"),
        }
        url, _ = stack.enter_context(api_process(env))
        started = stack.enter_context(engines(specs, root))
        for config, info in started:
            _setup(url, operator, config, info.served_model)
        served_model = started[0][1].served_model
        tenants = {
            False: new_tenant(url, operator, plan="enterprise", **UNLIMITED),
            True: new_tenant(url, operator, plan="enterprise", **UNLIMITED),  # the scanner
        }
        for k, run in enumerate(runs):
            names = [f"t{k}-a{i}" for i in range(run.shape.adapters)]
            owners = [tenants[is_scan(run.workload, i)][0] for i in range(run.shape.adapters)]
            upload_adapters(url, operator, served_model, owners, names, folders[: len(names)])

            def send(
                r: BenchRequest, k: int = k, run: Run = run
            ) -> tuple[dict[str, str], dict[str, Any]]:
                key = tenants[is_scan(run.workload, r.adapter)][1]
                body = chat_body(f"t{k}-a{r.adapter}", r, run.shape.max_tokens)
                return {"Authorization": f"Bearer {key}"}, body

            before = gateway_loads(url)
            served = _served(url, run.trace, send)
            served.loads = loads_between(before, gateway_loads(url))
            out.append(served)
    return out


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
    run: Run, capacity: float, ways: list[WayStats], gpu_slots: int, host_slots: int
) -> dict[str, Any]:
    shape = run.shape
    click.echo(
        f"\nworking set {shape.working_set:g}x the {shape.slots} GPU slots: "
        f"{shape.regular_adapters} adapters (Zipf a={shape.alpha:g}, hot set moved at "
        f"{shape.seconds / 2:.0f} s) + {shape.scan_adapters} scanned once; "
        f"{len(run.trace)} requests in {shape.seconds:.0f} s at {shape.rate_per_s:.2f}/s "
        f"(load x capacity {capacity:.2f}/s); {shape.max_tokens} tokens a reply; ms"
    )
    click.echo(table(ways))
    sim = predicted(run.workload, gpu_slots, host_slots)
    for row in sim:
        click.echo(
            f"simulator, same trace, GPU cost profile — {row['policy']}: TTFT p50 "
            f"{1000 * row['ttft_p50_s']:.0f} ms, p99 {1000 * row['ttft_p99_s']:.0f} ms; cold "
            f"loads {row['cold_loads']} (bound {row['cold_load_bound']}), host loads "
            f"{row['host_loads']}, GPU swaps {row['gpu_swaps']}"
        )
    verdicts = targets(ways)
    for line in verdicts:
        click.echo(line)
    return {
        "shape": asdict(shape),
        "ways": [w.row() for w in ways],
        "simulator": [{k: v for k, v in r.items() if not isinstance(v, dict)} for r in sim],
        "targets": verdicts,
    }
