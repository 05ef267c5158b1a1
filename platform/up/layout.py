"""Where `loraplex up` keeps everything under the data dir, in one place.

`--reset` removes exactly these paths, so a data dir shared with other tools (the repo's
`var/`, which also holds the test suite's engines) loses only what `up` made.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BASE_MODEL = "loraplex-tiny"


@dataclass(frozen=True)
class Layout:
    """The embedded platform's files under `root` (the data dir)."""

    root: Path

    @property
    def database(self) -> Path:
        """The SQLite control-plane database."""
        return self.root / "loraplex.db"

    @property
    def database_url(self) -> str:
        """The SQLAlchemy URL of `database`."""
        return f"sqlite+aiosqlite:///{self.database.resolve()}"

    @property
    def model_dir(self) -> Path:
        """The generated base model; the folder name is the served model id."""
        return self.root / "models" / BASE_MODEL

    @property
    def engine_dir(self) -> Path:
        """The engine's pid file, log and record (not `engine/`, which `loraplex engine start`
        uses by default for a development engine of its own)."""
        return self.root / "engine-up"

    @property
    def engine_api_key(self) -> Path:
        """The engine's `--api-key`, made on the first run (owner-only)."""
        return self.engine_dir / "api-key"

    @property
    def demo_dir(self) -> Path:
        """The demo's trained adapters and training file."""
        return self.root / "demo"

    @property
    def logs(self) -> Path:
        """One log file per child process."""
        return self.root / "logs"

    @property
    def credentials(self) -> Path:
        """The demo logins and key (owner-only)."""
        return self.root / "credentials.json"

    @property
    def pids(self) -> Path:
        """One pid file per running child (the engine's is in `engine_dir`)."""
        return self.root / "run"

    def pid_of(self, name: str) -> Path:
        """The pid file of child `name`."""
        return self.pids / f"{name}.pid"

    def log_of(self, name: str) -> Path:
        """The log file of child `name`."""
        return self.logs / f"{name}.log"

    def owned(self) -> list[Path]:
        """Every path `up` writes, for `--reset` (the engine's own venv is kept: reinstalling
        it takes minutes and holds no state)."""
        names = ("loraplex.db", "loraplex.db-wal", "loraplex.db-shm", "objects", "cache",
                 "uploads", "broker", "celerybeat-schedule", "operator.key", "models",
                 "engine-up", "demo", "logs", "run", "credentials.json")  # fmt: skip
        return [self.root / name for name in names]
