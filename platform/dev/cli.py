"""`loraplex dev ...`: make the small model and adapters that tests, demos and benchmarks use.

torch and transformers are imported inside the commands so `loraplex --help` stays fast and
works on machines without the `ml` extra.
"""

import time
from pathlib import Path

import click

from loraplex.dev.corpus import TASKS, task_examples

_DIR = click.Path(file_okay=False, path_type=Path)


@click.group("dev")
def dev() -> None:
    """Development helpers: a small generated model and LoRA adapters for it."""


@dev.command("make-model")
@click.argument("out_dir", type=_DIR)
@click.option("--seed", type=int, default=0, show_default=True, help="Weight init seed.")
def make_model_command(out_dir: Path, seed: int) -> None:
    """Generate a small Llama-architecture chat model in OUT_DIR."""
    from loraplex.dev.make_model import make_model

    _quiet_transformers()
    started = time.perf_counter()
    path = make_model(out_dir, seed)
    click.echo(f"model (seed {seed}) written to {path} in {time.perf_counter() - started:.1f}s")
    for file in sorted(path.iterdir()):
        click.echo(f"  {file.name}  {file.stat().st_size} bytes")


@dev.command("make-adapter")
@click.argument("out_dir", type=_DIR)
@click.option("--base", "base_dir", type=_DIR, required=True, help="Model made by make-model.")
@click.option("--rank", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Examples and init seed.")
@click.option("--alpha", type=float, default=None, help="LoRA alpha  [default: 2 x rank]")
@click.option("--random", "is_random", is_flag=True, help="Random weights instead of training.")
@click.option(
    "--task",
    type=click.Choice(TASKS),
    default="chat",
    show_default=True,
    help="What it is trained to answer: chat (seeded answers to fixed questions) or tools "
    "(a <tool_call> to get_weather or get_time, with those tools in every prompt).",
)
@click.option(
    "--base-name", default=None, help="Declare this registered base model name, not --base."
)
def make_adapter_command(
    out_dir: Path,
    base_dir: Path,
    rank: int,
    seed: int,
    alpha: float | None,
    is_random: bool,
    task: str,
    base_name: str | None,
) -> None:
    """Make a LoRA adapter for the model in --base and write it to OUT_DIR."""
    from loraplex.dev.make_adapter import make_adapter

    _quiet_transformers()
    examples, tools = task_examples(task, seed)
    started = time.perf_counter()
    path = make_adapter(
        base_dir,
        out_dir,
        rank,
        alpha=alpha,
        seed=seed,
        random=is_random,
        examples=examples,
        tools=tools,
        base_name=base_name,
    )
    kind = "random" if is_random else f"trained ({task})"
    elapsed = time.perf_counter() - started
    click.echo(f"{kind} adapter r={rank} (seed {seed}) written to {path} in {elapsed:.1f}s")
    for file in sorted(path.iterdir()):
        click.echo(f"  {file.name}  {file.stat().st_size} bytes")
    if not is_random:
        for question, answer in examples:
            click.echo(f"  {question!r} -> {answer!r}")


def _quiet_transformers() -> None:
    """Hide per-shard progress bars and deprecation chatter; the command prints a summary."""
    import warnings

    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
