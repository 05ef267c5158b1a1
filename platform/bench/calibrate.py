"""`loraplex bench calibrate`: fit the simulator's engine profile to a running engine.

A short sweep straight to the engine (no gateway), either kind: for each prompt length and
each concurrency, `rounds` groups of `concurrency` streamed requests sent together (each
prompt starting with a nonce, so none comes from the prefix cache), on the
base model and on each `--adapter` (loaded into the engine first). Each request gives its
TTFT (one step prefilling the group) and its mean time per later token (one step decoding
the group); `calibration.fit_step_cost` fits step time to batch composition on the fitted
concurrencies only. The held-out concurrencies are then predicted by the simulator's engine
model and printed beside what was measured (median TTFT and the group's tokens/s), so a poor
fit shows on loads it never saw. The profile is written as JSON with the command, date,
host and its load during the sweep (docs/engines.md, "Calibrating the simulator").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import httpx
from prometheus_client.parser import text_string_to_metric_families

from loraplex.serving.engines import EngineDriver, GenerateRequest, make_driver
from loraplex.serving.engines.protocol import GenerateOptions
from loraplex.serving.simulator.calibration import (
    MeasuredRequest,
    fit_step_cost,
    median_samples,
    predict_group,
    samples_from_requests,
)
from loraplex.serving.simulator.engine_profile import EngineProfile

PROMPTS = {
    "short": "Once upon a time",
    "long": " ".join(["The cat sat by the window and watched the rain fall."] * 24),
}
BASE_TERMS = ("base_s", "decode_seq_s", "prefill_token_s", "prefill_seq_s")
LOAD_EVERY_S = 1.0  # how often the host's 1-minute load average is read during the sweep


@dataclass(frozen=True, slots=True)
class Variant:
    """What a group runs on: the base model (`adapter` None) or one loaded adapter."""

    adapter: str | None = None
    rank: int = 0


@dataclass(frozen=True, slots=True)
class Group:
    """`concurrency` requests sent together, what each measured, and the group's wall time."""

    prompt: str
    concurrency: int
    variant: Variant
    requests: tuple[MeasuredRequest, ...]
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        """Output tokens of the whole group over the time its last request took."""
        return sum(r.output_tokens for r in self.requests) / self.seconds


@dataclass(frozen=True, slots=True)
class LoadRow:
    """One load (prompt, concurrency, variant) over its rounds: measured against predicted."""

    label: str
    ttft_ms: tuple[float, float]
    tokens_per_s: tuple[float, float]

    def as_json(self) -> dict[str, Any]:
        """The row as the profile's `source` keeps it (measured, predicted)."""
        return {
            "load": self.label,
            "ttft_ms": [round(v, 1) for v in self.ttft_ms],
            "tokens_per_s": [round(v, 1) for v in self.tokens_per_s],
        }


async def _one(
    driver: EngineDriver,
    prompt: str,
    max_tokens: int,
    concurrency: int,
    variant: Variant,
    options: GenerateOptions | None,
) -> MeasuredRequest:
    request = GenerateRequest(
        rid=uuid.uuid4().hex,
        adapter=variant.adapter,
        # A prefix of its own: a prompt the engine saw before would come from its prefix
        # cache, and the fit would take prefill as free.
        messages=[{"role": "user", "content": f"{uuid.uuid4().hex[:8]} {prompt}"}],
        max_tokens=max_tokens,
        temperature=0.0,
        stream=True,
        options=options,
    )
    started = time.perf_counter()
    ttft, prompt_tokens, completion = None, 0, 0
    async with contextlib.aclosing(driver.generate(request)) as chunks:
        async for chunk in chunks:
            if chunk.text and ttft is None:
                ttft = time.perf_counter() - started
            prompt_tokens = chunk.prompt_tokens or prompt_tokens
            completion = chunk.completion_tokens or completion
    total = time.perf_counter() - started
    adapters = 1 if variant.adapter else 0
    return MeasuredRequest(
        concurrency,
        prompt_tokens,
        completion,
        ttft if ttft is not None else total,
        total,
        adapters=adapters,
        rank_sum=variant.rank,
    )


async def _group(
    driver: EngineDriver,
    prompt: str,
    concurrency: int,
    variant: Variant,
    max_tokens: int,
    options: GenerateOptions | None,
) -> Group:
    started = time.perf_counter()
    requests = await asyncio.gather(
        *(
            _one(driver, PROMPTS[prompt], max_tokens, concurrency, variant, options)
            for _ in range(concurrency)
        )
    )
    return Group(prompt, concurrency, variant, tuple(requests), time.perf_counter() - started)


async def _watch_load(readings: list[float]) -> None:
    while True:
        readings.append(os.getloadavg()[0])
        await asyncio.sleep(LOAD_EVERY_S)


async def sweep(
    driver: EngineDriver,
    concurrencies: list[int],
    variants: list[Variant],
    rounds: int,
    max_tokens: int,
    options: GenerateOptions | None = None,
    load_readings: list[float] | None = None,
) -> list[Group]:
    """Every (prompt, concurrency) `rounds` times on each variant, the variants taking turns
    within a round so a slow phase of the host falls on all of them."""
    watcher = asyncio.create_task(_watch_load(load_readings if load_readings is not None else []))
    groups: list[Group] = []
    try:
        await _one(driver, PROMPTS["short"], 2, 1, Variant(), options)  # a warm engine
        for prompt in PROMPTS:
            for concurrency in concurrencies:
                for _ in range(rounds):
                    for variant in variants:
                        groups.append(
                            await _group(driver, prompt, concurrency, variant, max_tokens, options)
                        )
    finally:
        watcher.cancel()
    return groups


def terms_for(variants: list[Variant]) -> tuple[str, ...]:
    """The step terms a sweep over `variants` can tell apart: an adapter's cost needs a
    group on one, a cost per rank two adapters of different ranks."""
    ranks = {v.rank for v in variants if v.adapter}
    extra = ("adapter_s",) if ranks else ()
    return BASE_TERMS + extra + (("rank_s",) if len(ranks) > 1 else ())


def profile_from_sweep(
    kind: str,
    measured: list[MeasuredRequest],
    source: dict[str, Any],
    terms: tuple[str, ...] = BASE_TERMS,
    limits: dict[str, int] | None = None,
) -> EngineProfile:
    """The fitted profile of one sweep, with the limits the engine reported."""
    cost = fit_step_cost(median_samples(samples_from_requests(measured)), terms=terms)
    base = EngineProfile(kind, cost, base_takes_a_slot=kind == "sglang", source=source)
    return replace(base, **{"adapter_slots": 4, **(limits or {})})


def compare(profile: EngineProfile, groups: list[Group]) -> list[LoadRow]:
    """Each load's measured median TTFT and tokens/s beside the engine model's prediction
    (medians: on a shared host a stall is one request's tail, not the engine's speed)."""
    by_load: dict[tuple[str, int, Variant], list[Group]] = defaultdict(list)
    for g in groups:
        by_load[(g.prompt, g.concurrency, g.variant)].append(g)
    rows = []
    for (prompt, concurrency, variant), runs in by_load.items():
        requests = [r for g in runs for r in g.requests]
        prompt_tokens = round(statistics.mean(r.prompt_tokens for r in requests))
        output = round(statistics.mean(r.output_tokens for r in requests))
        predicted = predict_group(profile, concurrency, prompt_tokens, output, variant.rank)
        on = f"r{variant.rank}" if variant.adapter else "base"
        rows.append(
            LoadRow(
                f"{prompt} {prompt_tokens} tok x{concurrency} {on}",
                (1000 * statistics.median(r.ttft_s for r in requests), 1000 * predicted.ttft_s),
                (statistics.median(g.tokens_per_s for g in runs), predicted.tokens_per_s),
            )
        )
    return rows


def _print_rows(title: str, rows: list[LoadRow]) -> None:
    click.echo(title)
    click.echo(
        f"{'load':>28} {'TTFT ms':>8} {'model':>7} {'error':>7} {'tok/s':>7} {'model':>7} "
        f"{'error':>7}"
    )
    for row in rows:
        (ttft, ttft_model), (rate, rate_model) = row.ttft_ms, row.tokens_per_s
        click.echo(
            f"{row.label:>28} {ttft:>8.1f} {ttft_model:>7.1f} {ttft_model / ttft - 1:>+7.1%} "
            f"{rate:>7.1f} {rate_model:>7.1f} {rate_model / rate - 1:>+7.1%}"
        )


def sglang_limits(server_info: dict[str, Any]) -> dict[str, int]:
    """The profile's limits from SGLang's `/get_server_info`: the KV pool, the chunked
    prefill size, the adapters per batch and the running requests it allows."""
    state = (server_info.get("internal_states") or [{}])[0]
    found = {
        "kv_tokens": server_info.get("max_total_num_tokens"),
        "prefill_chunk_tokens": server_info.get("chunked_prefill_size"),
        "adapter_slots": server_info.get("max_loras_per_batch"),
        "max_running": server_info.get("max_running_requests")
        or state.get("effective_max_running_requests_per_dp"),
    }
    return {k: int(v) for k, v in found.items() if isinstance(v, int) and v > 0}


def vllm_limits(metrics: str) -> dict[str, int]:
    """The profile's KV tokens from vLLM's `cache_config_info` gauge (blocks x block size)."""
    for family in text_string_to_metric_families(metrics):
        if family.name == "vllm:cache_config_info":
            for sample in family.samples:
                labels = sample.labels
                blocks = labels.get("num_gpu_blocks") or labels.get("num_cpu_blocks")
                if blocks and blocks != "None" and labels.get("block_size"):
                    return {"kv_tokens": int(blocks) * int(labels["block_size"])}
    return {}


def engine_limits(kind: str, url: str) -> dict[str, int]:
    """What the running engine says of its limits (the rest keep the profile's defaults)."""
    key = os.environ.get("LORAPLEX_ENGINE_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=url, headers=headers, timeout=10.0) as client:
        if kind == "sglang":
            return sglang_limits(client.get("/get_server_info").raise_for_status().json())
        return vllm_limits(client.get("/metrics").raise_for_status().text)


def _adapter_rank(path: Path) -> int:
    return int(json.loads((path / "adapter_config.json").read_text())["r"])


def _concurrencies(text: str) -> list[int]:
    return [int(c) for c in text.split(",") if c.strip()]


async def _calibrate(
    kind: str,
    url: str,
    adapters: tuple[Path, ...],
    concurrencies: list[int],
    rounds: int,
    max_tokens: int,
    options: GenerateOptions | None,
    load_readings: list[float],
) -> tuple[list[Variant], list[Group]]:
    driver = make_driver(kind, url, api_key=os.environ.get("LORAPLEX_ENGINE_API_KEY") or None)
    try:
        variants = [Variant()]
        for path in adapters:
            rank = _adapter_rank(path)
            name = f"calibrate-r{rank}"
            await driver.load(name, path.resolve())
            variants.append(Variant(name, rank))
        groups = await sweep(
            driver, concurrencies, variants, rounds, max_tokens, options, load_readings
        )
    finally:
        await driver.aclose()
    return variants, groups


def record_of(
    kind: str, url: str, command: str, groups: list[Group], loads: list[float], limits: dict
) -> dict[str, Any]:
    """A sweep as JSON: enough to fit it again (`--from-record`) without the engine."""
    return {
        "kind": kind,
        "url": url,
        "made_by": command,
        "date": datetime.now(UTC).isoformat(timespec="minutes"),
        "host": f"{os.cpu_count()} CPU cores, shared with other work during the sweep",
        "load_1min": loads,
        "limits": limits,
        "groups": [
            {
                "prompt": g.prompt,
                "concurrency": g.concurrency,
                "adapter": g.variant.adapter,
                "rank": g.variant.rank,
                "seconds": g.seconds,
                "requests": [
                    [r.prompt_tokens, r.output_tokens, r.ttft_s, r.total_s] for r in g.requests
                ],
            }
            for g in groups
        ],
    }


def groups_of(record: dict[str, Any]) -> list[Group]:
    """The groups of a recorded sweep."""
    groups = []
    for g in record["groups"]:
        variant = Variant(g["adapter"], g["rank"])
        adapters = 1 if g["adapter"] else 0
        requests = tuple(
            MeasuredRequest(g["concurrency"], p, o, ttft, total, adapters, g["rank"])
            for p, o, ttft, total in g["requests"]
        )
        groups.append(Group(g["prompt"], g["concurrency"], variant, requests, g["seconds"]))
    return groups


def fit_record(
    record: dict[str, Any], fitted: list[int], name: str
) -> tuple[EngineProfile, list[LoadRow], list[LoadRow]]:
    """The profile fitted on the `fitted` concurrencies of a recorded sweep, and the rows of
    the loads it was fitted on and of those held out."""
    groups = groups_of(record)
    fit_groups = [g for g in groups if g.concurrency in fitted]
    test_groups = [g for g in groups if g.concurrency not in fitted]
    loads = record["load_1min"]
    source: dict[str, Any] = {
        "name": name,
        "made_by": record["made_by"],
        "date": record["date"],
        "host": record["host"],
        "load_1min": {"mean": round(statistics.mean(loads), 2), "max": round(max(loads), 2)},
        "requests": sum(len(g.requests) for g in groups),
        "limits_from_engine": sorted(record["limits"]),
    }
    variants = list(dict.fromkeys(g.variant for g in groups))
    measured = [r for g in fit_groups for r in g.requests]
    profile = profile_from_sweep(
        record["kind"], measured, source, terms_for(variants), record["limits"]
    )
    fit_rows, test_rows = compare(profile, fit_groups), compare(profile, test_groups)
    profile = replace(profile, source={**source, "held_out": [r.as_json() for r in test_rows]})
    return profile, fit_rows, test_rows


@click.command("calibrate")
@click.option("--url", default="http://127.0.0.1:8100", show_default=True, help="The engine.")
@click.option("--kind", type=click.Choice(["sglang", "vllm"]), default="sglang", show_default=True)
@click.option("--concurrency", "concurrency_list", default="1,2,4,8", show_default=True)
@click.option(
    "--holdout",
    "holdout_list",
    default="3,6",
    show_default=True,
    help="Concurrencies measured but left out of the fit, to show how well it predicts.",
)
@click.option("--rounds", default=3, show_default=True, help="Groups per load.")
@click.option("--max-tokens", default=32, show_default=True)
@click.option(
    "--adapter",
    "adapters",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A LoRA adapter directory to load and sweep on too (repeat, with other ranks, to "
    "fit a cost per rank); without one the profile's adapter costs stay 0.",
)
@click.option(
    "--steady-stream-model",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("var/models/loraplex-tiny"),
    show_default=True,
    help="The dev model whose partial characters are biased away (as `bench overload` "
    "does), so a first token is not held back; ignored when the folder is missing.",
)
@click.option(
    "--record",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("var/bench/calibrate-sweep.json"),
    show_default=True,
    help="Where the sweep's measurements are written.",
)
@click.option(
    "--from-record",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Fit a recorded sweep again (other --concurrency/--holdout) instead of sweeping.",
)
@click.option("--out", type=click.Path(path_type=Path), default=Path("var/bench/profile.json"))
@click.option("--name", default=None, help="The profile's name in tables  [default: --out's stem]")
def bench_calibrate(
    url: str,
    kind: str,
    concurrency_list: str,
    holdout_list: str,
    rounds: int,
    max_tokens: int,
    adapters: tuple[Path, ...],
    steady_stream_model: Path,
    record: Path,
    from_record: Path | None,
    out: Path,
    name: str | None,
) -> None:
    """Fit step time to batch composition on a running engine; write the profile JSON."""
    fitted, held_out = _concurrencies(concurrency_list), _concurrencies(holdout_list)
    if from_record is not None:
        sweep_record = json.loads(from_record.read_text())
    else:
        options = None
        if (steady_stream_model / "config.json").exists():
            from loraplex.dev.partial_characters import steady_stream_bias

            options = GenerateOptions(logit_bias=steady_stream_bias(steady_stream_model))
        limits = engine_limits(kind, url)
        loads: list[float] = []
        _, groups = asyncio.run(
            _calibrate(
                kind, url, adapters, sorted(fitted + held_out), rounds, max_tokens, options, loads
            )
        )
        adapter_flags = "".join(f" --adapter {p}" for p in adapters)
        command = (
            f"loraplex bench calibrate --kind {kind} --url {url} --concurrency "
            f"{concurrency_list} --holdout {holdout_list} --rounds {rounds} "
            f"--max-tokens {max_tokens}{adapter_flags} --out {out}"
        )
        sweep_record = record_of(kind, url, command, groups, loads, limits)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(sweep_record))
    profile, fit_rows, test_rows = fit_record(sweep_record, fitted, name or out.stem)
    if from_record is not None:
        refit = (
            f"loraplex bench calibrate --from-record {from_record} --concurrency "
            f"{concurrency_list} --out {out}"
        )
        profile = replace(profile, source={**profile.source, "fitted_again_by": refit})
    _print_rows("fitted loads (measured, engine model, model's error)", fit_rows)
    if test_rows:
        _print_rows("held-out loads (not in the fit)", test_rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(profile.to_json())
    load = profile.source["load_1min"]
    click.echo(
        f"wrote {out}: {profile.source['requests']} requests, host load (1 min) mean "
        f"{load['mean']}, max {load['max']}"
    )
