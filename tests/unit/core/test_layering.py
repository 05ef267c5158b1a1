"""The console is a client of the services, not of the API's HTTP layer: no module under
web/ imports a module that defines API controllers (their handlers are HTTP plumbing; what
both need lives in a service or a shared dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.python_ast import parse

ROOT = Path(__file__).resolve().parents[3]


def controller_modules() -> set[str]:
    """`loraplex.*` modules under platform/ that define a Litestar `Controller` subclass."""
    found = set()
    for path in (ROOT / "platform").rglob("*.py"):
        tree = parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                (isinstance(b, ast.Name) and b.id.endswith("Controller"))
                or (isinstance(b, ast.Attribute) and b.attr.endswith("Controller"))
                for b in node.bases
            ):
                parts = path.relative_to(ROOT / "platform").with_suffix("").parts
                found.add(".".join(("loraplex", *parts)))
                break
    return found


def imported_modules(source: str) -> set[str]:
    """Every module a source file imports (absolute imports only: the codebase's style)."""
    names = set()
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def controller_imports(source: str, controllers: set[str]) -> set[str]:
    return imported_modules(source) & controllers


def test_the_check_finds_controller_modules_and_flags_an_import_of_one() -> None:
    controllers = controller_modules()
    assert "loraplex.gateway.controller" in controllers
    assert "loraplex.control.tenants.controller" in controllers
    source = "from loraplex.gateway.controller import InferenceController\n"
    assert controller_imports(source, controllers) == {"loraplex.gateway.controller"}


def test_no_console_module_imports_an_api_controller_module() -> None:
    controllers = controller_modules()
    offenders = {
        str(path.relative_to(ROOT)): sorted(controller_imports(path.read_text(), controllers))
        for path in sorted((ROOT / "web").rglob("*.py"))
        if "node_modules" not in path.parts
    }
    assert {path: names for path, names in offenders.items() if names} == {}
