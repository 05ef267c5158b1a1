"""`loraplex nodes mint|list|revoke`: node credentials from the command line (in-database,
like `loraplex admin create-operator`), for deployments that provision agents by script."""

from __future__ import annotations

import click

from loraplex.settings import Settings


@click.group("nodes")
def nodes() -> None:
    """Credentials of node agents: one engine name each, shown once, revocable."""


@nodes.command("mint")
@click.argument("engine_name")
@click.pass_obj
def mint(settings: Settings, engine_name: str) -> None:
    """Mint a credential that may register only ENGINE_NAME; print it (shown once).

    Give it to that node's agent as LORAPLEX_NODE_CREDENTIAL.
    """
    import msgspec

    from loraplex.control.engines.schemas import EngineName
    from loraplex.control.nodes.service import NodeCredentialService
    from loraplex.db.config import run_in_session

    try:
        msgspec.convert(engine_name, EngineName)
    except msgspec.ValidationError as exc:
        raise click.BadParameter(
            "lowercase letters, digits, '.', '_' or '-' (at most 100)", param_hint="ENGINE_NAME"
        ) from exc
    created = run_in_session(
        settings, lambda session: NodeCredentialService(session=session).mint(engine_name, "cli")
    )
    click.echo(f"node credential {created.prefix} for engine {engine_name}:", err=True)
    click.echo(created.credential)


@nodes.command("list")
@click.pass_obj
def list_credentials(settings: Settings) -> None:
    """Every credential: prefix, engine name, state."""
    from loraplex.control.nodes.service import NodeCredentialService
    from loraplex.db.config import run_in_session

    async def rows(session: object) -> list[str]:
        found = await NodeCredentialService(session=session).list()  # type: ignore[arg-type]
        return [
            f"{r.prefix}  {r.engine_name}  {'revoked' if r.revoked_at else 'live'}"
            for r in sorted(found, key=lambda r: r.created_at)
        ]

    for line in run_in_session(settings, rows):
        click.echo(line)


@nodes.command("revoke")
@click.argument("prefix")
@click.pass_obj
def revoke(settings: Settings, prefix: str) -> None:
    """Revoke the credential with PREFIX (as `list` shows it)."""
    from loraplex.control.nodes.service import NodeCredentialService
    from loraplex.db.config import run_in_session
    from loraplex.errors import LoraplexError

    async def revoke_it(session: object) -> str:
        service = NodeCredentialService(session=session)  # type: ignore[arg-type]
        row = await service.revoke((await service.by_prefix(prefix)).id, "cli")
        return row.engine_name

    try:
        name = run_in_session(settings, revoke_it)
    except LoraplexError as exc:
        raise click.ClickException(exc.detail) from exc
    click.echo(f"revoked node credential {prefix} (engine {name})")
