"""The release before the newest migration, unpacked beside the repository so that it runs
as its own API process, as an old pod does during a rolling upgrade.

The previous release is `PREVIOUS_RELEASE` when it names a commit in the history: the last
commit CI ran whole before this release's migrations (a work session's commits in between
are not releases; one of them, mid-way through a change, could not start). Without it, the
parent of the commit that added the newest migration: the last code one migration behind. Its folders come out of git (`git archive`)
into a folder laid out as the installed package (`loraplex/` with `adapters/`, `web/`, ...
inside, as setup.py maps them), which goes first on PYTHONPATH: the process then imports
the old code and the shared virtual environment's libraries.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# Set when a release lands; its migration head is 0008 (choices quota), this release adds
# 0009-0018 (node credentials, engine drain, budgets, SSO, adapter import, evals, canary
# analysis, correctness probes, eval usage kind, agent secrets).
PREVIOUS_RELEASE = "3185763d7c7c362c9f742cd92a977b673eb3467d"
FOLDERS = {"platform": "", "adapters": "adapters", "workers": "workers", "web": "web",
           "migrations": "migrations"}  # fmt: skip


@dataclass(frozen=True)
class OldRelease:
    """The unpacked previous release: its commit, migration head and import root."""

    commit: str
    newest_migration: str  # the migration it lacks
    root: Path  # goes first on PYTHONPATH

    def env(self) -> dict[str, str]:
        """What makes a process import this release instead of the working tree."""
        return {"PYTHONPATH": str(self.root)}

    def imports_itself(self) -> bool:
        """Whether a process started with `env()` imports this release, not the working tree."""
        code = "import loraplex.app, loraplex.migrations as m; print(loraplex.app.__file__, m.__file__)"
        done = subprocess.run(
            [sys.executable, "-c", code], env={**os.environ, **self.env()}, cwd=self.root,
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        files = [Path(f).resolve() for f in done.stdout.split()]
        return (
            all(not f.is_relative_to(REPO) for f in files)
            and not (
                self.root / "loraplex" / "migrations" / "versions" / f"{self.newest_migration}.py"
            ).exists()
        )

    def cli(self, *args: str, env: dict[str, str]) -> str:
        """Run this release's `loraplex` command; its standard output."""
        done = subprocess.run(
            [sys.executable, "-m", "loraplex.cli", *args],
            env={**env, **self.env()}, cwd=self.root, capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout


def newest_migration() -> Path:
    """The migration file with the highest number."""
    return max((REPO / "migrations" / "versions").glob("[0-9]*.py"))


def previous_release(into: Path) -> OldRelease | None:
    """Unpack the release before the newest migration into `into`; None without git history
    (an exported tree, a shallow clone that lacks the commit)."""
    migration = newest_migration()
    if _git("cat-file", "-t", PREVIOUS_RELEASE) == "commit":
        commit = PREVIOUS_RELEASE
    else:
        added = _git("log", "--diff-filter=A", "--format=%H", "-1", "--", str(migration))
        if not added:
            return None
        commit = f"{added}^"
    archive = _git_bytes("archive", "--format=tar", commit, *FOLDERS)
    if archive is None:
        return None
    source = into / "source"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(source, filter="data")
    package = into / "root" / "loraplex"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")  # a regular package: no mixing with the new code
    for entry in (source / "platform").iterdir():
        (package / entry.name).symlink_to(entry)
    for folder, name in FOLDERS.items():
        if name:
            (package / name).symlink_to(source / folder)
    modules = REPO / "web" / "node_modules"  # front-end files come from npm, not from git
    if modules.exists():
        (source / "web" / "node_modules").symlink_to(modules)
    return OldRelease(_git("rev-parse", commit), migration.stem, into / "root")


def _git(*args: str) -> str:
    out = _git_bytes(*args)
    return out.decode().strip() if out else ""


def _git_bytes(*args: str) -> bytes | None:
    done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, check=False)
    return done.stdout if done.returncode == 0 else None
