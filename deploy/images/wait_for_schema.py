"""Wait until the database schema is at least what this image's migrations expect.

Shipped in the Loraplex images as /opt/loraplex/wait_for_schema.py and run by the
`wait-for-schema` initContainer of the API, worker and beat pods (deploy/k8s/base). The
migration Job (`loraplex db upgrade`) is the only thing that changes the schema; this script
only reads it, so any number of pods may run it at once.

It exits 0 when the database's Alembic revision is this image's head, or a revision this
image does not know (a newer image's migration ran first: migrations are additive, so an
older pod still works on the newer schema — the rule docs/deploy.md asks operators to keep).
It keeps polling while the database is unreachable, empty, or at an older revision, and
exits 1 after --timeout seconds.

With --reachable it waits only for the database to answer, whatever its revision: the
migration Job's and Compose's `migrate` wait before `loraplex db upgrade`, so a database
that starts slower than the release (a managed instance waking, a restart) is not a failed Job.

    python /opt/loraplex/wait_for_schema.py [--timeout 900] [--interval 5] [--reachable]

The database comes from LORAPLEX_DATABASE_URL, as for every Loraplex process.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import create_async_engine

from loraplex.db.migrate import alembic_config
from loraplex.settings import Settings


def expected_heads(database_url: str) -> set[str]:
    """The head revisions of the migrations packaged in this image."""
    return set(ScriptDirectory.from_config(alembic_config(database_url)).get_heads())


def known_revisions(database_url: str) -> set[str]:
    """Every revision this image's migrations define."""
    script = ScriptDirectory.from_config(alembic_config(database_url))
    return {revision.revision for revision in script.walk_revisions()}


async def current_heads(database_url: str) -> set[str]:
    """The revisions the database is at (empty: not migrated yet)."""
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as connection:
            heads = await connection.run_sync(
                lambda sync: MigrationContext.configure(sync).get_current_heads()
            )
            return set(heads)
    finally:
        await engine.dispose()


def schema_verdict(current: set[str], expected: set[str], known: set[str]) -> str | None:
    """Why the schema is usable ("head", "newer"), or None while it is not yet."""
    if current and current == expected:
        return "head"
    if current and not current <= known:
        return "newer"
    return None


def wait(
    database_url: str, timeout_s: float, interval_s: float, reachable_only: bool = False
) -> int:
    """Poll the database until its schema is usable (or, `reachable_only`, until it
    answers); 0 when it is, 1 on timeout."""
    return asyncio.run(_wait(database_url, timeout_s, interval_s, reachable_only))


async def _wait(
    database_url: str, timeout_s: float, interval_s: float, reachable_only: bool
) -> int:
    expected = expected_heads(database_url)
    known = known_revisions(database_url)
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        try:
            current = await current_heads(database_url)
            verdict = "reachable" if reachable_only else schema_verdict(current, expected, known)
            if verdict is not None:
                print(f"schema ready ({verdict}): {sorted(current)}", flush=True)
                return 0
            at = sorted(current) or "no revision"
            status = f"database at {at}, waiting for {sorted(expected)}"
        except Exception as exc:  # unreachable or not created yet: keep polling
            status = f"database not reachable yet: {type(exc).__name__}: {exc}"
        if status != last:
            print(status, flush=True)
            last = status
        if time.monotonic() >= deadline:
            print(f"gave up after {timeout_s:.0f} s: {status}", file=sys.stderr, flush=True)
            return 1
        await asyncio.sleep(interval_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before giving up")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between polls")
    parser.add_argument(
        "--reachable", action="store_true", help="wait only until the database answers"
    )
    args = parser.parse_args(argv)
    return wait(Settings.from_env().database_url, args.timeout, args.interval, args.reachable)


if __name__ == "__main__":
    sys.exit(main())
