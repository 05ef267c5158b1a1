"""`loraplex engine start|stop|status`: a development engine, SGLang (default) or vLLM."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from loraplex.serving.engines.launcher import (
    RECIPES,
    EngineConfig,
    EngineStartError,
    is_healthy,
    read_info,
    read_pid,
    start_engine,
    stop_engine,
)

_DEFAULTS = EngineConfig()


def _config(state_dir: Path, **values: object) -> EngineConfig:
    """An engine config from CLI options; `None` options keep their defaults."""
    chosen = {key: value for key, value in values.items() if value is not None}
    return replace(EngineConfig(state_dir=state_dir), **chosen)


_state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=_DEFAULTS.state_dir,
    show_default=True,
    help="Where the pid file, log and record of the engine live.",
)


@click.group("engine")
def engine() -> None:
    """Run a development inference engine with LoRA enabled (SGLang by default, or vLLM)."""


@engine.command("start")
@click.option(
    "--kind",
    type=click.Choice(sorted(RECIPES)),
    default=_DEFAULTS.kind,
    show_default=True,
    help="sglang: the production engine (on CPU with Loraplex's kernel stand-in); "
    "vllm: vLLM's CPU build.",
)
@click.option(
    "--model",
    "model_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=_DEFAULTS.model_dir,
    show_default=True,
    help="Base model directory; generated with `make_model` if missing.",
)
@click.option("--port", type=int, default=_DEFAULTS.port, show_default=True)
@click.option("--max-lora-rank", type=int, default=_DEFAULTS.max_lora_rank, show_default=True)
@click.option(
    "--max-loras",
    type=int,
    default=_DEFAULTS.max_loras,
    show_default=True,
    help="Adapters active in one batch, the GPU slots (vLLM --max-loras, SGLang "
    "--max-loras-per-batch, where base-model requests take one of them).",
)
@click.option(
    "--max-cpu-loras",
    type=int,
    default=_DEFAULTS.max_cpu_loras,
    show_default=True,
    help="Adapters held in host memory (vLLM --max-cpu-loras, SGLang --max-loaded-loras).",
)
@click.option(
    "--scheduler-nice",
    type=click.IntRange(0, 19),
    default=_DEFAULTS.scheduler_nice,
    show_default=True,
    help="CPU priority of vLLM's busy-waiting EngineCore (0 normal, 19 lowest), so it does "
    "not starve the engine's frontend and the platform on a small machine.",
)
@click.option(
    "--api-key",
    envvar="LORAPLEX_ENGINE_API_KEY",
    default="",
    show_default=False,
    help="Start the engine with --api-key: every route but health and metrics then wants "
    "it as a bearer token [default: LORAPLEX_ENGINE_API_KEY; the API sends the same].",
)
@_state_dir_option
def start(
    kind: str,
    model_dir: Path,
    port: int,
    max_lora_rank: int,
    max_loras: int,
    max_cpu_loras: int,
    scheduler_nice: int,
    api_key: str,
    state_dir: Path,
) -> None:
    """Install (first time) and start the engine, or reuse the healthy one; print its URL."""
    config = _config(
        state_dir,
        kind=kind,
        model_dir=model_dir,
        port=port,
        max_lora_rank=max_lora_rank,
        max_loras=max_loras,
        max_cpu_loras=max_cpu_loras,
        scheduler_nice=scheduler_nice,
        api_key=api_key,
    )
    try:
        info = start_engine(config, say=lambda line: click.echo(line, err=True))
    except EngineStartError as exc:
        raise click.ClickException(str(exc)) from exc
    how = "reused" if info.reused else f"started in {info.startup_s:.1f}s"
    click.echo(f"{info.kind} engine {how}: serving {info.served_model}", err=True)
    click.echo(info.url)


@engine.command("stop")
@_state_dir_option
def stop(state_dir: Path) -> None:
    """Stop the engine started by `engine start`."""
    stopped = stop_engine(EngineConfig(state_dir=state_dir))
    click.echo("engine stopped" if stopped else "no engine was running")


@engine.command("status")
@_state_dir_option
def status(state_dir: Path) -> None:
    """Say whether the engine runs, where, and whether it answers."""
    config = EngineConfig(state_dir=state_dir)
    pid, info = read_pid(config), read_info(config)
    if pid is None or info is None:
        click.echo("engine: not running")
        raise SystemExit(1)
    health = "healthy" if is_healthy(info.url) else "not answering"
    click.echo(
        f"engine: {info.kind}, running, pid {pid}, {info.url}, {health}, "
        f"serving {info.served_model}"
    )
