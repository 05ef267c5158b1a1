"""Every migration after the first is additive, so the old release's pods keep serving while
the migration Job runs and until the new pods replace them (docs/deploy.md, "Upgrades").

Additive means: nothing the old code reads or writes goes away or changes shape. A new
column is nullable or has a server default (the old code inserts rows without it); no table,
column or constraint is dropped, renamed or retyped; no data is rewritten by raw SQL.
A change that is not additive ships as two releases (expand, then contract once no pod of
the old release runs); a contracting migration says so with `CONTRACTS = "<why it is safe>"`
at module level, which this check then lets through.
`tests/integration/upgrade` runs the release before the newest migration against it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.python_ast import parse

VERSIONS = Path(__file__).resolve().parents[3] / "migrations" / "versions"
REMOVING = {"drop_table", "drop_column", "drop_constraint", "rename_table"}


def later_migrations() -> list[Path]:
    return sorted(p for p in VERSIONS.glob("[0-9]*.py") if not p.name.startswith("0001_"))


def _upgrade(tree: ast.Module) -> ast.FunctionDef:
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "upgrade")


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _declares_contract(tree: ast.Module) -> bool:
    return any(
        isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "CONTRACTS" for t in n.targets)
        for n in tree.body
    )


def not_additive(path: Path) -> list[str]:
    """What in `path`'s upgrade() would break the old release's pods."""
    tree = parse(path.read_text())
    if _declares_contract(tree):
        return []
    found = []
    for node in ast.walk(_upgrade(tree)):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "attr", getattr(node.func, "id", ""))
        where = f"{path.name}:{node.lineno}"
        if name in REMOVING:
            found.append(f"{where}: {name}")
        if (
            name == "execute"
            and getattr(node.func, "value", None) is not None
            and (getattr(node.func.value, "id", "") == "op")
        ):
            found.append(f"{where}: raw SQL (op.execute) may rewrite what the old release reads")
        if name == "alter_column" and any(
            _keyword(node, k) is not None for k in ("new_column_name", "type_", "nullable")
        ):
            found.append(f"{where}: alter_column changes a column the old release uses")
        if name == "add_column":  # columns of a new table are the new release's alone
            for column in (a for a in node.args if isinstance(a, ast.Call)):
                nullable = _keyword(column, "nullable")
                required = isinstance(nullable, ast.Constant) and nullable.value is False
                if required and _keyword(column, "server_default") is None:
                    found.append(f"{where}: a NOT NULL column without a server default")
    return found


@pytest.mark.parametrize("migration", later_migrations(), ids=lambda p: p.stem)
def test_the_migration_is_additive(migration: Path) -> None:
    assert not_additive(migration) == []


def test_the_check_catches_a_dropped_column_and_a_required_column(tmp_path: Path) -> None:
    bad = tmp_path / "0099_bad.py"
    bad.write_text(
        "def upgrade():\n"
        "    with op.batch_alter_table('t') as b:\n"
        "        b.drop_column('old')\n"
        "        b.add_column(sa.Column('new', sa.Integer(), nullable=False))\n"
        "    op.create_table('fresh', sa.Column('id', sa.Integer(), nullable=False))\n"
    )
    assert len(not_additive(bad)) == 2  # the new table's required column is fine
