"""`loraplex bench api`: requests/s of an authenticated control-plane read on one worker.

Baseline in the same run: `GET /healthz` (no key, no database) on the same server, so the
table shows what authentication + a tenant-scoped database read cost per request.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import shutil
import subprocess
from pathlib import Path

import click
import httpx

from loraplex.bench.server import api_process
from loraplex.control.bootstrap import create_operator
from loraplex.db import migrate
from loraplex.db.config import sqlalchemy_config
from loraplex.settings import Settings


def operator_key(settings: Settings) -> str:
    """A new operator's API key in the configured database, migrated first as `loraplex up`
    does: a bench run on a fresh clone has no tables yet."""
    migrate.upgrade(settings.database_url)
    return asyncio.run(_operator_key(settings))


async def _operator_key(settings: Settings) -> str:
    config = sqlalchemy_config(settings)
    try:
        async with config.get_session() as session:
            # one operator per run: a database that served an earlier run already has one
            email = f"bench-{secrets.token_hex(4)}@localhost"
            key = await create_operator(session, email, "bench")
            await session.commit()
            return key
    finally:
        await config.get_engine().dispose()


def _wrk(url: str, seconds: int, connections: int, header: str | None) -> dict[str, float]:
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", url]
    if header:
        cmd[1:1] = ["-H", header]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": rps,
        "p50_ms": _ms(p50),
        "p99_ms": _ms(p99),
        "errors": float(non2xx.group(1)) if non2xx else 0.0,
    }


def _ms(match: re.Match[str] | None) -> float:
    if match is None:
        return float("nan")
    value, unit = float(match.group(1)), match.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


@click.command("api")
@click.option("--seconds", default=10, show_default=True)
@click.option("--connections", default=32, show_default=True)
@click.option(
    "--json", "json_path", type=click.Path(path_type=Path), default=Path("var/bench/api.json")
)
@click.pass_obj
def bench_api(settings: Settings, seconds: int, connections: int, json_path: Path) -> None:
    """Requests/s of `GET /api/v1/tenants/{id}` with a tenant key, against `GET /healthz`."""
    if shutil.which("wrk") is None:
        raise click.ClickException("needs wrk (Debian: apt-get install wrk)")
    key = operator_key(settings)
    env = {"LORAPLEX_DATABASE_URL": settings.database_url, "LORAPLEX_REDIS_URL": settings.redis_url}
    with api_process(env) as (url, _pid):
        auth = {"Authorization": f"Bearer {key}"}
        slug = f"bench-{secrets.token_hex(4)}"
        tenant = httpx.post(
            f"{url}/api/v1/tenants", json={"slug": slug, "name": slug}, headers=auth
        ).json()
        tkey = httpx.post(
            f"{url}/api/v1/tenants/{tenant['id']}/api-keys",
            json={"name": "bench", "scopes": ["read"]},
            headers=auth,
        ).json()["key"]
        _wrk(f"{url}/healthz", 2, connections, None)  # warm up
        rows = {
            "GET /healthz (baseline)": _wrk(f"{url}/healthz", seconds, connections, None),
            "GET /api/v1/tenants/{id} (tenant key)": _wrk(
                f"{url}/api/v1/tenants/{tenant['id']}",
                seconds,
                connections,
                f"Authorization: Bearer {tkey}",
            ),
        }
    click.echo(f"one uvicorn worker, {connections} connections, {seconds}s each (wrk -t1)")
    click.echo(f"{'endpoint':42} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'non-2xx':>8}")
    for name, row in rows.items():
        click.echo(
            f"{name:42} {row['rps']:9.0f} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f} "
            f"{row['errors']:8.0f}"
        )
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(rows, indent=2))
