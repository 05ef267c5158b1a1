"""The `loraplex` command line: one entry point for every process and admin task."""

from __future__ import annotations

import importlib
import socket
from pathlib import Path

import click

from loraplex.control.base_models.copy_cli import pull_base_model, push_base_model
from loraplex.settings import Settings

# Command groups that live with their feature, by command name: imported only when that
# command runs (or `--help` lists them), because importing them all (torch, Celery, the engine
# launchers) cost ~3 s on every `loraplex` start, an init container's pull included.
FEATURE_COMMANDS = {
    "up": ("loraplex.up", "up"),
    "bench": ("loraplex.bench.cli", "bench"),
    "worker": ("loraplex.workers.cli", "worker"),
    "beat": ("loraplex.workers.cli", "beat"),
    "agent": ("loraplex.serving.agent_cli", "agent"),
    "nodes": ("loraplex.control.nodes.cli", "nodes"),
    "sso": ("loraplex.auth.sso.cli", "sso"),
    "dev": ("loraplex.dev.cli", "dev"),
    "engine": ("loraplex.serving.engines.cli", "engine"),
    "simulate": ("loraplex.serving.simulator.cli", "simulate"),
}


class FeatureGroup(click.Group):
    """The top-level group: its own commands, plus each feature's, imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command, the features' included."""
        return sorted({*super().list_commands(ctx), *FEATURE_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """A feature's command is imported here; None when its feature is not installed."""
        if cmd_name not in FEATURE_COMMANDS:
            return super().get_command(ctx, cmd_name)
        module_name, attr = FEATURE_COMMANDS[cmd_name]
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return None  # feature not installed in this build
        command: click.Command = getattr(module, attr)
        return command


@click.group(cls=FeatureGroup)
@click.pass_context
def main(ctx: click.Context) -> None:
    """Loraplex: serve many LoRA adapters to many tenants."""
    ctx.obj = Settings.from_env()


@main.command()
@click.option("--host", default=None, help="bind address (default: LORAPLEX_HOST)")
@click.option("--port", type=int, default=None, help="port (default: LORAPLEX_PORT)")
@click.option("--workers", type=int, default=None, help="worker processes")
@click.option("--migrate/--no-migrate", default=False, help="upgrade the database first")
@click.pass_obj
def api(
    settings: Settings, host: str | None, port: int | None, workers: int | None, migrate: bool
) -> None:
    """Start the API server."""
    import uvicorn

    from loraplex.db import migrate as migrations

    if migrate:
        migrations.upgrade(settings.database_url)
    host, port = host or settings.host, port or settings.port
    if (workers or settings.workers) > 1 and not settings.redis_url:
        raise click.UsageError(
            "without LORAPLEX_REDIS_URL each API worker process would keep its own quotas "
            "(the in-process Redis stand-in); set LORAPLEX_REDIS_URL to run several workers"
        )
    sock = listening_socket(host, port, settings.socket_sndbuf_bytes)
    click.echo(f"Loraplex API listening on http://{host}:{port} (OpenAPI at /schema)")
    uvicorn.run(
        "loraplex.app:create_app",
        factory=True,
        fd=sock.fileno(),
        # Longer than clients' idle pools (httpx 5 s, the openai SDK's): a server that drops an
        # idle keep-alive connection first makes the client's next request fail with ReadError.
        timeout_keep_alive=settings.keep_alive_s,
        workers=workers or settings.workers,
        log_level="warning",
        access_log=False,
    )


def listening_socket(host: str, port: int, sndbuf: int) -> socket.socket:
    """A bound, listening socket; accepted connections inherit its send buffer size."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # uvicorn sets TCP_NODELAY only on sockets it binds itself; accepted sockets inherit it
    # from this one. Without it Nagle's algorithm adds ~40 ms to small streamed writes.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if sndbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


@main.group()
def db() -> None:
    """Database schema migrations."""


@db.command("upgrade")
@click.argument("revision", default="head")
@click.pass_obj
def db_upgrade(settings: Settings, revision: str) -> None:
    """Migrate the database up (default: to the newest revision)."""
    from loraplex.db import migrate

    migrate.upgrade(settings.database_url, revision)
    click.echo(f"database at {revision}")


@db.command("downgrade")
@click.argument("revision", default="base")
@click.pass_obj
def db_downgrade(settings: Settings, revision: str) -> None:
    """Migrate the database down (default: to an empty schema)."""
    from loraplex.db import migrate

    migrate.downgrade(settings.database_url, revision)
    click.echo(f"database at {revision}")


@main.group()
def admin() -> None:
    """Operator administration."""


@admin.command("create-operator")
@click.option("--email", required=True)
@click.option("--name", default="operator")
@click.pass_obj
def create_operator(settings: Settings, email: str, name: str) -> None:
    """Create an operator user and print a new operator API key (shown once)."""
    from loraplex.control.bootstrap import create_operator as create
    from loraplex.db.config import run_in_session

    key = run_in_session(settings, lambda session: create(session, email, name))
    click.echo(key)


@admin.command("set-password")
@click.option("--email", required=True)
@click.password_option(help="read from a hidden prompt when not given")
@click.pass_obj
def set_password(settings: Settings, email: str, password: str) -> None:
    """Set a user's console password (operators sign in to /admin with it)."""
    from loraplex.control.bootstrap import set_password as set_it
    from loraplex.db.config import run_in_session
    from loraplex.errors import LoraplexError

    try:
        run_in_session(settings, lambda session: set_it(session, email, password))
    except LoraplexError as exc:
        raise click.ClickException(exc.detail) from exc
    click.echo(f"password set for {email}")


@main.group("base-models")
def base_models() -> None:
    """Base models adapters are trained on."""


@base_models.command("register")
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--name", default=None, help="model id (default: the folder name)")
@click.pass_obj
def register_base_model(settings: Settings, model_dir: Path, name: str | None) -> None:
    """Read a model's architecture facts from its folder and register it."""
    from loraplex.control.bootstrap import register_base_model as register
    from loraplex.db.config import run_in_session

    model_id = run_in_session(settings, lambda session: register(session, model_dir, name))
    click.echo(f"registered base model {name or model_dir.name} ({model_id})")


base_models.add_command(push_base_model)
base_models.add_command(pull_base_model)


@main.group("adapters")
def adapters_group() -> None:
    """Adapter storage maintenance."""


@adapters_group.command("reap")
@click.option(
    "--stale-after", type=float, default=3600.0, help="seconds before an upload counts as dead"
)
@click.pass_obj
def reap_adapters(settings: Settings, stale_after: float) -> None:
    """Fail dead uploads and delete object-store files no version owns."""
    from loraplex.connections import open_object_store
    from loraplex.control.adapters.reaper import reap
    from loraplex.db.config import run_in_session

    store = open_object_store(settings)
    report = run_in_session(
        settings, lambda session: reap(session, store, stale_after_s=stale_after)
    )
    click.echo(
        f"failed {report.stale_versions_failed} stale uploads, "
        f"deleted {report.orphan_objects_deleted} orphan objects"
    )


if __name__ == "__main__":
    main()
