"""What `loraplex bench adapters` sets up: the adapters, the engines of each way, the tenants
and uploads of the Loraplex way, the gateway's load counters, and PEFT's reference answers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import click
import httpx
from prometheus_client.parser import text_string_to_metric_families

from loraplex.bench.adapters_replay import Answer
from loraplex.bench.adapters_trace import rank_of
from loraplex.bench.scrape import metrics_text
from loraplex.bench.upload import _api_upload
from loraplex.serving.engines import make_driver
from loraplex.serving.engines.launcher import EngineConfig, EngineInfo, start_engine, stop_engine

SGLANG = "sglang"


def make_adapters(model_dir: Path, root: Path, count: int) -> list[Path]:
    """`count` random LoRA adapters on the dev model, adapter `i` of rank `rank_of(i)` made
    with seed `i`; ones already in `root` from an earlier run are kept (same seed, same
    weights)."""
    from loraplex.dev.make_adapter import make_adapter  # torch: import only when used

    folders = []
    for i in range(count):
        folder = root / f"a{i}-r{rank_of(i)}"
        if not (folder / "adapter_model.safetensors").exists():
            make_adapter(
                model_dir, folder, rank=rank_of(i), seed=i, random=True, base_name=model_dir.name
            )
        folders.append(folder)
    return folders


@dataclass(frozen=True, slots=True)
class EngineSlots:
    """One engine of a way: its rank class and slots."""

    name: str
    port: int  # fixed, so a later run's registration replaces this one's (bench gateway)
    rank: int
    gpu_slots: int
    host_slots: int
    model_dir: Path | None = None  # the dev model's when None


@contextlib.contextmanager
def engines(
    specs: list[EngineSlots], root: Path
) -> Iterator[list[tuple[EngineConfig, EngineInfo]]]:
    """Start an SGLang engine per spec (state under `root`); stop them all afterwards. The
    first starts alone (it installs the engine's environment when missing), the others
    side by side: an engine's start is mostly waiting on its own imports and warm-up."""
    configs = [_config(spec, root) for spec in specs]
    try:
        started = [_start(configs[0], specs[0])] if specs else []
        with ThreadPoolExecutor(max_workers=max(1, len(specs) - 1)) as pool:
            later = [pool.submit(_start, c, s) for c, s in zip(configs[1:], specs[1:], strict=True)]
            started += [f.result() for f in later]  # the first failure raises, after all ended
        yield started
    finally:
        for config in configs:  # stopping one that never started does nothing
            stop_engine(config)


def _config(spec: EngineSlots, root: Path) -> EngineConfig:
    return replace(
        EngineConfig(kind=SGLANG),
        model_dir=spec.model_dir or EngineConfig().model_dir,
        port=spec.port,
        state_dir=root / f"engine-{spec.name}",
        max_lora_rank=spec.rank,
        max_loras=spec.gpu_slots,
        max_cpu_loras=spec.host_slots,
    )


def _start(config: EngineConfig, spec: EngineSlots) -> tuple[EngineConfig, EngineInfo]:
    say = lambda line: click.echo(f"[{spec.name}] {line}", err=True)  # noqa: E731
    return config, start_engine(config, say=say)


def register_everywhere(urls: list[str], names: list[str], folders: list[Path]) -> None:
    """Load every adapter into every engine up front, as a plain SGLang user would."""

    async def load_all() -> None:
        for url in urls:
            driver = make_driver(SGLANG, url)
            try:
                for name, folder in zip(names, folders, strict=True):
                    await driver.load(name, folder.resolve())
            finally:
                await driver.aclose()

    asyncio.run(load_all())


def upload_adapters(
    url: str, operator: str, base: str, owners: list[str], names: list[str], folders: list[Path]
) -> None:
    """Create each adapter under its owner tenant and upload its files through the API."""
    ops = {"Authorization": f"Bearer {operator}"}
    for tenant_id, name, folder in zip(owners, names, folders, strict=True):
        created = httpx.post(
            f"{url}/api/v1/tenants/{tenant_id}/adapters",
            json={"name": name, "base_model": base},
            headers=ops,
            timeout=60,
        )
        if created.status_code != 201:
            raise click.ClickException(f"adapter {name}: {created.status_code} {created.text}")
        _api_upload(url, operator, tenant_id, name, folder)


# The gateway counts the loads it makes by the tier loaded into: `disk` (a fetch from the
# object store), `loaded` (into an engine's memory) and `active` (a GPU slot, as modelled).
LOADS_METRIC = "loraplex_adapter_loads"


def gateway_loads(url: str) -> dict[str, float]:
    """The gateway's adapter-load counters now, by tier (successful loads only)."""
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text(url)):
        if family.name != LOADS_METRIC:
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels.get("result") == "ok":
                tier = sample.labels["tier"]
                counts[tier] = counts.get(tier, 0.0) + sample.value
    return counts


def loads_between(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    """Loads by the bench's tiers between two reads: `cold` (from the object store) and
    `host` (into an engine's memory: every cold load and every load from disk)."""
    grew = {tier: int(after.get(tier, 0) - before.get(tier, 0)) for tier in after}
    return {"cold": grew.get("disk", 0), "host": grew.get("loaded", 0)}


def sampled(answers: list[Answer], per_adapter: int) -> list[Answer]:
    """The first `per_adapter` completed short answers of each adapter: the ones checked."""
    taken: dict[int, int] = {}
    chosen = []
    for answer in answers:
        if answer.ok and not answer.long and taken.get(answer.adapter, 0) < per_adapter:
            taken[answer.adapter] = taken.get(answer.adapter, 0) + 1
            chosen.append(answer)
    return chosen


def peft_answers(
    model_dir: Path, folders: list[Path], pairs: set[tuple[int, str]], max_tokens: int, cache: Path
) -> dict[tuple[int, str], str]:
    """PEFT's greedy answer for each (adapter, question), in-process; cached in `cache`
    (adapters are made from their seed, so an answer holds across runs)."""
    from loraplex.dev.reference import greedy_answers  # torch: import only when used

    known: dict[str, str] = json.loads(cache.read_text()) if cache.exists() else {}
    by_adapter: dict[int, list[str]] = {}
    for adapter, question in sorted(pairs):
        if _key(adapter, question, max_tokens) not in known:
            by_adapter.setdefault(adapter, []).append(question)
    for adapter, questions in by_adapter.items():
        texts = greedy_answers(model_dir, folders[adapter], questions, max_tokens)
        for question, text in zip(questions, texts, strict=True):
            known[_key(adapter, question, max_tokens)] = text
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(known, indent=1))
    return {(a, q): known[_key(a, q, max_tokens)] for a, q in pairs}


def _key(adapter: int, question: str, max_tokens: int) -> str:
    return f"{adapter}|{max_tokens}|{question}"


def settled_loads(url: str, quiet_s: float, timeout_s: float = 300.0) -> dict[str, float]:
    """The gateway's load counters once they have not moved for `quiet_s` (the loads that
    uploads set off, warming, have ended), or after `timeout_s` whatever they do."""
    deadline = time.monotonic() + timeout_s
    last, since = gateway_loads(url), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.5)
        now = gateway_loads(url)
        if now != last:
            last, since = now, time.monotonic()
    return last
