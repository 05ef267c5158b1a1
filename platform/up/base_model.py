"""The engine's base model for `loraplex up`, through the object store as on a production node.

Production engines get their model from `loraplex base-models pull` in an init container;
`up` takes the same path so a newcomer's first run exercises it: the generated model is
pushed to the store once, then pulled into the folder the engine and the workers read. A
later run finds the pulled copy complete by its marker and reads no weights.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from loraplex.adapters.store.base import ObjectStore
from loraplex.control.base_models.manifest import manifest_key
from loraplex.control.base_models.pull import pull_model
from loraplex.control.base_models.push import push_model
from loraplex.up.layout import BASE_MODEL, Layout


def prepare_base_model(store: ObjectStore, layout: Layout, say: Callable[[str], None]) -> None:
    """Push the generated model unless the store has it, then pull it into `model_dir`."""
    if not store.exists(manifest_key(BASE_MODEL)):
        push_base_model(store, layout, say)
    report = pull_model(store, BASE_MODEL, layout.model_dir, say=_quiet)
    say(f"  {report.summary()}")


def push_base_model(store: ObjectStore, layout: Layout, say: Callable[[str], None]) -> None:
    """Push the model: the folder an earlier `up` generated in place, else a new one."""
    if (layout.model_dir / "config.json").exists():  # a data dir from before the store
        report = push_model(store, layout.model_dir, BASE_MODEL, say=say)
    else:
        generated = generate_model(layout)
        report = push_model(store, generated, BASE_MODEL, say=say)
        shutil.rmtree(generated)  # the store holds it now; the pull makes the served copy
    say(f"  {report.summary()}")


def generate_model(layout: Layout) -> Path:
    """Generate the base model in a child process (torch stays out of this one)."""
    partial = layout.model_dir.with_name(layout.model_dir.name + ".generated")
    shutil.rmtree(partial, ignore_errors=True)
    layout.logs.mkdir(parents=True, exist_ok=True)
    with open(layout.log_of("model"), "ab") as out:
        subprocess.run(
            [sys.executable, "-m", "loraplex.cli", "dev", "make-model", str(partial)],
            stdout=out, stderr=subprocess.STDOUT, check=True,
        )  # fmt: skip
    return partial


def _quiet(line: str) -> None:
    """Per-file lines of a pull: its summary says enough on a terminal."""
