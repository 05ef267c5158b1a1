"""`loraplex bench parity`: do the engines' greedy answers equal PEFT's, adapter by adapter?

For each engine kind it starts (or reuses) the development engine, loads adapters of ranks
8, 16 and 64 trained on the generated model, and asks each the questions it was trained
on, greedy, one at a time and then all at once; the reference is PEFT in-process on the
same weights. Prints the table (adapter by engine: equal answers / asked) and writes JSON.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
from dataclasses import replace
from pathlib import Path

import click

from loraplex.serving.engines import GenerateRequest, make_driver
from loraplex.serving.engines.launcher import EngineConfig, start_engine

RANKS = (8, 16, 64)
PORTS = {"sglang": 8100, "vllm": 8110}
STATE_DIRS = {"sglang": "var/engine", "vllm": "var/engine-vllm"}


async def _engine_answers(
    kind: str, url: str, adapters: dict[int, Path], questions: dict[int, list[str]], at_once: bool
) -> dict[int, list[str]]:
    driver = make_driver(kind, url)
    try:
        names = {rank: f"parity-{uuid.uuid4().hex[:10]}" for rank in adapters}
        for rank, folder in adapters.items():
            await driver.load(names[rank], folder)

        async def ask(rank: int, question: str) -> str:
            request = GenerateRequest(
                rid=uuid.uuid4().hex, adapter=names[rank], stream=False, temperature=0.0,
                max_tokens=32, messages=[{"role": "user", "content": question}],
            )  # fmt: skip
            return "".join([chunk.text async for chunk in driver.generate(request)])

        jobs = [(rank, q) for rank in adapters for q in questions[rank]]
        if at_once:
            texts = await asyncio.gather(*(ask(rank, q) for rank, q in jobs))
        else:
            texts = [await ask(rank, q) for rank, q in jobs]
        answers: dict[int, list[str]] = {rank: [] for rank in adapters}
        for (rank, _), text in zip(jobs, texts, strict=True):
            answers[rank].append(text)
        for name in names.values():
            await driver.unload(name)
        return answers
    finally:
        await driver.aclose()


@click.command("parity")
@click.option("--kinds", default="sglang,vllm", show_default=True, help="Engine kinds to check.")
@click.option("--questions", default=5, show_default=True, help="Questions per adapter.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("var/bench/parity.json"))
def bench_parity(kinds: str, questions: int, out: Path) -> None:
    """Greedy answers of each engine vs PEFT in-process, for adapters of ranks 8/16/64."""
    from loraplex.dev.corpus import adapter_examples
    from loraplex.dev.make_adapter import make_adapter
    from loraplex.dev.reference import greedy_answers

    rows: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds.split(","):
            config = replace(
                EngineConfig(kind=kind), port=PORTS[kind], state_dir=Path(STATE_DIRS[kind])
            )
            info = start_engine(config, say=lambda line: click.echo(line, err=True))
            model_dir = Path(info.model_dir)
            adapters = {
                r: make_adapter(model_dir, Path(tmp) / f"r{r}", rank=r, seed=r) for r in RANKS
            }
            asked = {r: [q for q, _ in adapter_examples(r)][:questions] for r in RANKS}
            expected = {r: greedy_answers(model_dir, adapters[r], asked[r]) for r in RANKS}
            for at_once in (False, True):
                got = asyncio.run(_engine_answers(kind, info.url, adapters, asked, at_once))
                column = f"{kind} ({'all at once' if at_once else 'one at a time'})"
                for rank in RANKS:
                    equal = sum(a == b for a, b in zip(got[rank], expected[rank], strict=True))
                    rows.setdefault(f"r{rank}", {})[column] = f"{equal}/{len(expected[rank])}"
    columns = list(next(iter(rows.values())))
    click.echo("| adapter | " + " | ".join(columns) + " |")
    click.echo("|---|" + "---|" * len(columns))
    for adapter, cells in rows.items():
        click.echo(f"| {adapter} | " + " | ".join(cells[c] for c in columns) + " |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
