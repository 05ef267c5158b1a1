"""The repository layout keeps the standard library importable and every package shipped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_stdlib_platform_module_is_not_shadowed_from_repo_root() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import platform, uuid; platform.system()"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_platform_folder_has_no_init_module() -> None:
    assert not (ROOT / "platform" / "__init__.py").exists()


def test_every_source_folder_is_a_package_in_the_distribution() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from setup import PACKAGE_ROOTS, _packages  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(ROOT))
    shipped = set(_packages())
    for package, folder in PACKAGE_ROOTS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            name = ".".join([package, *relative.parts]) if relative.parts else package
            assert name in shipped, f"{init.parent} is not shipped as {name}"
