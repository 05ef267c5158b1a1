"""docs/deploy.md's configuration reference is what deploy/config_reference.py renders from
`loraplex.settings.Settings` now: adding, removing or re-commenting a setting without
rerunning the generator fails here."""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
from types import ModuleType

from loraplex.settings import PREFIX, Settings
from tests.unit.deploy import support


def generator() -> ModuleType:
    path = support.DEPLOY / "config_reference.py"
    spec = importlib.util.spec_from_file_location("deploy_config_reference", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_reference_in_docs_is_current() -> None:
    reference = generator()
    document = support.DEPLOY_DOC.read_text(encoding="utf-8")
    assert reference.splice(document, reference.render()) == document, (
        "docs/deploy.md's settings table is stale: run .venv/bin/python deploy/config_reference.py"
    )


def test_every_setting_is_listed_once() -> None:
    table = generator().render()
    for f in dataclasses.fields(Settings):
        assert table.count(f"| `{PREFIX}{f.name.upper()}` |") == 1, f.name


def test_rows_carry_type_default_and_comment() -> None:
    rows = {e.variable: e for e in generator().entries()}
    assert rows["LORAPLEX_PORT"].type == "int" and rows["LORAPLEX_PORT"].default == "8000"
    assert rows["LORAPLEX_SECURE_COOKIES"].default == "auto"
    assert "local mode" in rows["LORAPLEX_SECURE_COOKIES"].comment  # the comment above it
    assert "in-process" in rows["LORAPLEX_REDIS_URL"].comment  # the comment on its line
    assert rows["LORAPLEX_DATABASE_URL"].section == "Storage"
    assert rows["LORAPLEX_ENGINES"].type == "JSON list"


def test_check_mode_detects_a_stale_file(tmp_path) -> None:
    reference = generator()
    stale = tmp_path / "deploy.md"
    stale.write_text(f"intro\n{reference.BEGIN}\n| old |\n{reference.END}\noutro\n")
    script = str(support.DEPLOY / "config_reference.py")
    check = [sys.executable, script, "--check", "--doc", str(stale)]
    assert subprocess.run(check, capture_output=True, timeout=60, check=False).returncode == 1
    subprocess.run([sys.executable, script, "--doc", str(stale)], check=True, timeout=60)
    assert subprocess.run(check, capture_output=True, timeout=60, check=False).returncode == 0
    text = stale.read_text()
    assert text.startswith("intro\n") and text.endswith("outro\n") and "| old |" not in text
