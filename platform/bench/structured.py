"""`loraplex bench structured`: what a `json_schema` request adds to TTFT, direct vs gateway.

One stream at a time, the four kinds of request interleaved in every round (plain direct,
plain gateway, json_schema direct, json_schema gateway), so engine warm-up and machine noise
fall on all four alike. The table shows TTFT p50 per kind and what the gateway adds to each:
a gateway that re-parses or re-validates structured output on the hot path would add more
to the json_schema row than to the plain one.
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

import aiohttp
import click
import msgspec

from loraplex.bench.api import operator_key
from loraplex.bench.gateway import KIND_OPTION, PROMPT, _one, _setup
from loraplex.bench.server import api_process, without_shedding
from loraplex.dev.corpus import VERDICT_SCHEMA
from loraplex.dev.partial_characters import steady_stream_bias
from loraplex.serving.engines.launcher import EngineConfig, start_engine
from loraplex.settings import Settings

FORMATS = {
    "plain": {},
    "json_schema": {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": VERDICT_SCHEMA, "strict": True},
        }
    },
}


def _body(model: str, fmt: str, max_tokens: int, bias: dict[str, float]) -> bytes:
    return msgspec.json.encode(
        {
            "model": model,
            # both kinds alike: the dev model's partial characters would hold back its text
            "logit_bias": bias,
            "messages": PROMPT,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            **FORMATS[fmt],
        }
    )


async def _measure(
    paths: dict[str, tuple[str, dict[str, str], str]],
    rounds: int,
    max_tokens: int,
    bias: dict[str, float],
) -> dict[tuple[str, str], list[float]]:
    ttfts: dict[tuple[str, str], list[float]] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as client:
        for round_ in range(rounds + 1):  # round 0 warms up (grammar compile, kernels)
            for fmt in FORMATS:
                for path, (url, headers, model) in paths.items():
                    ttft, _ = await _one(client, url, headers, _body(model, fmt, max_tokens, bias))
                    if round_:
                        ttfts.setdefault((fmt, path), []).append(ttft)
    return ttfts


@click.command("structured")
@KIND_OPTION
@click.option("--rounds", default=20, show_default=True, help="requests per kind of request")
@click.option("--max-tokens", default=16, show_default=True)
@click.pass_obj
def bench_structured(settings: Settings, kind: str, rounds: int, max_tokens: int) -> None:
    """TTFT of plain and json_schema requests, engine direct vs through the gateway."""
    engine = EngineConfig(kind=kind)
    info = start_engine(engine, say=lambda line: click.echo(f"[engine] {line}", err=True))
    operator = operator_key(settings)
    with api_process(without_shedding(settings).to_env()) as (url, _):
        key = _setup(url, operator, engine, info.served_model)
        paths = {
            "direct": (f"{engine.url}/v1/chat/completions", {}, info.served_model),
            "gateway": (
                f"{url}/v1/chat/completions",
                {"Authorization": f"Bearer {key}"},
                info.served_model,
            ),
        }
        bias = steady_stream_bias(Path(info.model_dir))
        ttfts = asyncio.run(_measure(paths, rounds, max_tokens, bias))
    click.echo(f"{kind} engine, {rounds} requests per row, one stream at a time")
    click.echo(f"{'request':<12} {'TTFT p50 direct':>16} {'gateway':>8} {'added':>7}")
    for fmt in FORMATS:
        direct = 1000 * statistics.median(ttfts[(fmt, "direct")])
        gateway = 1000 * statistics.median(ttfts[(fmt, "gateway")])
        click.echo(f"{fmt:<12} {direct:>13.1f} ms {gateway:>5.1f} ms {gateway - direct:>4.1f} ms")
