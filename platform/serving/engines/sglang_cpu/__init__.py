"""What SGLang needs to run on a CPU-only machine, and how it gets into the engine's venv.

Two things are shipped into the SGLang engine's virtual environment (docs/sglang-on-cpu.md):
the `sgl_kernel` stand-in (this package's `sgl_kernel/`) and the import-time fixes
(`boot.py`, imported from a `.pth` file so every SGLang subprocess gets them). On a machine
with a GPU none of this is installed: stock SGLang uses the real `sglang-kernel`.

`missing_cpu_ops` is the guard for upgrades: it reads the installed SGLang's source for the
names it imports from `sgl_kernel` on its CPU path, so a newer pinned SGLang that needs an
op the stand-in lacks fails at install time, naming the op, instead of at first request.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
STAND_IN = HERE / "sgl_kernel"
BOOT = HERE / "boot.py"
BOOT_MODULE = "loraplex_sglang_cpu_boot"
PTH_FILE = "loraplex_sglang_cpu.pth"
STAMP_FILE = ".loraplex-stamp"
_CPU_FLAGS = {"_is_cpu"}
_CPU_CALLS = {"is_cpu"}
# Branches that also test for Intel AMX are skipped: SGLang takes them only when sgl_kernel
# registers its fused ops under torch.ops.sgl_kernel, which the stand-in never does.


def install_into(site_packages: Path) -> None:
    """Copy the stand-in and the boot fixes into an environment's site-packages, unless the
    same ones are there already. Engines starting side by side each call this: a lock keeps
    one copying at a time, and the stamp keeps a running engine's files from being replaced
    under it when nothing changed."""
    target = site_packages / "sgl_kernel"
    stamp = _fingerprint()
    with (site_packages / "loraplex_sglang_cpu.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp_file = target / STAMP_FILE
        if stamp_file.exists() and stamp_file.read_text() == stamp:
            return
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(STAND_IN, target, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copyfile(BOOT, site_packages / f"{BOOT_MODULE}.py")
        (site_packages / PTH_FILE).write_text(f"import {BOOT_MODULE}\n")
        stamp_file.write_text(stamp)


def _fingerprint() -> str:
    """A digest of what install_into copies."""
    digest = hashlib.sha256()
    for path in [*sorted(STAND_IN.rglob("*.py")), BOOT]:
        digest.update(str(path.relative_to(HERE)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def provided_ops() -> set[str]:
    """The names the stand-in defines, read from its source (no torch import needed)."""
    tree = ast.parse((STAND_IN / "__init__.py").read_text())
    names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "SPECULATIVE_ONLY" for t in node.targets
        ):
            names.update(ast.literal_eval(node.value))
    return {name for name in names if not name.startswith("_")}


def cpu_imports(sglang_root: Path) -> dict[str, str]:
    """Names SGLang imports from `sgl_kernel` under a CPU condition → the file that does."""
    found: dict[str, str] = {}
    for path in sorted(sglang_root.rglob("*.py")):
        text = path.read_text(errors="replace")
        if "sgl_kernel" not in text:
            continue
        for name in _imports_under_cpu(ast.parse(text)):
            found.setdefault(name, str(path.relative_to(sglang_root)))
    return found


def missing_cpu_ops(sglang_root: Path) -> dict[str, str]:
    """CPU-path imports of SGLang's that the stand-in does not define → where they are."""
    have = provided_ops()
    return {name: where for name, where in cpu_imports(sglang_root).items() if name not in have}


def _imports_under_cpu(tree: ast.AST) -> list[str]:
    """`from sgl_kernel import X` statements inside an `if` branch taken only on CPU."""
    names: list[str] = []

    def visit(node: ast.AST, on_cpu: bool) -> None:
        if isinstance(node, ast.If):
            for child in node.body:
                visit(child, on_cpu or _requires_cpu(node.test))
            for child in node.orelse:
                visit(child, on_cpu)
            return
        if isinstance(node, ast.ImportFrom) and node.module == "sgl_kernel" and on_cpu:
            names.extend(alias.name for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child, on_cpu)

    visit(tree, False)
    return names


def _requires_cpu(test: ast.expr) -> bool:
    """Whether an `if` test holds only on SGLang's CPU path: `_is_cpu`, `is_cpu()`, or an
    `and` with one of them (and no AMX condition). `not _is_cpu` does not count."""
    if isinstance(test, ast.Name):
        return test.id in _CPU_FLAGS
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name):
        return test.func.id in _CPU_CALLS
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        mentions_amx = any("amx" in ast.dump(value).lower() for value in test.values)
        return not mentions_amx and any(_requires_cpu(value) for value in test.values)
    return False
