"""`loraplex up`'s own logic: preflight messages, restarts, kept secrets, embedded settings."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from loraplex.cli import main
from loraplex.settings import Settings
from loraplex.up.children import MAX_RESTARTS, ChildFailed, Process, Supervisor
from loraplex.up.cli import embedded_settings
from loraplex.up.demo import ADAPTERS, Credentials


def test_a_port_in_use_gets_a_message_naming_it_and_the_option(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            main, ["up", "--port", str(port)], env={"LORAPLEX_DATA_DIR": str(tmp_path)}
        )
    assert result.exit_code == 2
    assert f"port {port}" in result.output and "--port" in result.output


def test_a_data_dir_that_cannot_be_written_gets_a_message(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = CliRunner().invoke(main, ["up"], env={"LORAPLEX_DATA_DIR": str(blocker / "data")})
    assert result.exit_code == 2
    assert "is not writable" in result.output and "LORAPLEX_DATA_DIR" in result.output


def test_a_child_that_dies_is_restarted_then_named_when_it_keeps_dying(tmp_path: Path) -> None:
    said: list[str] = []
    supervisor = Supervisor(said.append)
    quitter = Process("quitter", ["--help"], dict(os.environ), tmp_path / "quitter.log")
    supervisor.start(quitter)
    quitter.proc.wait(30)  # type: ignore[union-attr]
    with pytest.raises(ChildFailed) as failed:
        for _ in range(MAX_RESTARTS + 1):
            supervisor.check()
            quitter.proc.wait(30)  # type: ignore[union-attr]
    assert failed.value.name == "quitter" and "quitter.log" in str(failed.value)
    assert sum("restarting it" in line for line in said) == MAX_RESTARTS
    supervisor.stop_all()


def test_credentials_are_made_once_and_only_their_owner_can_read_them(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    made = Credentials.load_or_make(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert Credentials.load_or_make(path) == made
    assert made.admin_password != made.operator_password


def test_the_database_lives_in_the_data_dir_unless_one_is_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LORAPLEX_DATABASE_URL", raising=False)
    settings = embedded_settings(Settings(data_dir=tmp_path), port=9123)
    assert settings.database_url == f"sqlite+aiosqlite:///{tmp_path.resolve()}/loraplex.db"
    assert settings.port == 9123 and not settings.redis_url
    monkeypatch.setenv("LORAPLEX_DATABASE_URL", "postgresql+asyncpg://db/x")
    kept = embedded_settings(Settings(database_url="postgresql+asyncpg://db/x"), port=None)
    assert kept.database_url == "postgresql+asyncpg://db/x"


def test_the_demo_adapters_answer_differently_and_span_three_rank_classes() -> None:
    assert len({a.persona for a in ADAPTERS}) == len(ADAPTERS)
    assert sorted(a.rank for a in ADAPTERS) == [8, 16, 64]
