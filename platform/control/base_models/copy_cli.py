"""`loraplex base-models push` and `pull`: base model folders through the object store.

The store is the one adapters use (`LORAPLEX_OBJECT_STORE`, `LORAPLEX_S3_*`), so an engine
node's init container pulls with the environment its agent already has.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import click

from loraplex.settings import Settings


def _say(line: str) -> None:
    click.echo(line)


@click.command("push")
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--name", default=None, help="model name in the store (default: the folder name)")
@click.pass_obj
def push_base_model(settings: Settings, model_dir: Path, name: str | None) -> None:
    """Upload a model folder to the object store as base-models/NAME/ (manifest last)."""
    from loraplex.connections import open_object_store
    from loraplex.control.base_models.push import push_model

    with _clear_errors():
        report = push_model(open_object_store(settings), model_dir, name, say=_say)
    _say(report.summary())


@click.command("pull")
@click.argument("name")
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@click.option("--verify", is_flag=True, help="hash every file, even when the copy is complete")
@click.option(
    "--lock-timeout",
    type=click.FloatRange(0, 86400),
    default=3600.0,
    show_default=True,
    help="seconds to wait while another pull fills DEST",
)
@click.pass_obj
def pull_base_model(
    settings: Settings, name: str, dest: Path, verify: bool, lock_timeout: float
) -> None:
    """Copy model NAME from the object store into the folder DEST, fetching only what is missing."""
    from loraplex.connections import open_object_store
    from loraplex.control.base_models.pull import pull_model

    with _clear_errors():
        report = pull_model(open_object_store(settings), name, dest, verify=verify,
                            lock_timeout_s=lock_timeout, say=_say)  # fmt: skip
    _say(report.summary())


@contextlib.contextmanager
def _clear_errors() -> Iterator[None]:
    """Turn the errors a copy can meet into one-line messages and exit code 1."""
    # Imported here: every `loraplex` command imports this module, and these bring boto3.
    from loraplex.adapters.errors import ObjectCorrupt, ObjectMissing, StoreUnavailable
    from loraplex.control.base_models.manifest import ManifestError

    try:
        yield
    except (ManifestError, ObjectCorrupt, ObjectMissing, StoreUnavailable) as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"{exc.filename or ''}: {exc.strerror or exc}") from exc
