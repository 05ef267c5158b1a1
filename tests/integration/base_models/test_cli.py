"""`loraplex base-models push` and `pull` as processes, configured only by the environment an
engine node's agent has (`LORAPLEX_OBJECT_STORE=s3`, `LORAPLEX_S3_*`), exactly as an init
container runs them: `loraplex base-models pull <NAME> /models/<NAME>`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.base_models.test_push_pull import tree
from tests.support.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server

NAME = "Tiny-Chat-1B"
MIB = 1024 * 1024


@pytest.fixture
def env(s3_server: S3Server, tmp_path: Path) -> dict[str, str]:
    """The agent's environment: S3 settings only, on a fresh bucket."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("LORAPLEX_")}
    return {
        **kept,
        "PYTHONUNBUFFERED": "1",
        "LORAPLEX_DATA_DIR": str(tmp_path / "data"),
        "LORAPLEX_OBJECT_STORE": "s3",
        "LORAPLEX_S3_ENDPOINT_URL": s3_server.endpoint_url,
        "LORAPLEX_S3_BUCKET": f"models-{uuid.uuid4().hex[:12]}",
        "LORAPLEX_S3_REGION": REGION,
        "LORAPLEX_S3_ACCESS_KEY_ID": ACCESS_KEY,
        "LORAPLEX_S3_SECRET_ACCESS_KEY": SECRET_KEY,
    }


def loraplex(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run one `loraplex` command to its end."""
    command = [sys.executable, "-m", "loraplex.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def pushed(env: dict[str, str], model_dir: Path) -> None:
    """Push `model_dir` under its folder name."""
    result = loraplex(env, "base-models", "push", str(model_dir))
    assert result.returncode == 0, result.stderr
    assert f"{NAME}: pushed 7 files" in result.stdout


def wait_for_partial_file(dest: Path, timeout_s: float = 20.0) -> Path | None:
    """The first file a pull is still writing under a temporary name in `dest`, if one shows."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [p for p in dest.glob(".*loraplex-partial-*") if p.is_file()]
        if found:
            return found[0]
        time.sleep(0.005)
    return None


def test_pull_prints_what_it_fetched_then_that_a_second_start_fetched_nothing(
    env: dict[str, str], model_dir: Path, tmp_path: Path
) -> None:
    pushed(env, model_dir)
    dest = tmp_path / "models" / NAME
    first = loraplex(env, "base-models", "pull", NAME, str(dest))
    assert first.returncode == 0, first.stderr
    assert "fetched config.json" in first.stdout
    assert f"{NAME}: fetched 7 files" in first.stdout and "kept 0 files" in first.stdout
    assert tree(dest) == tree(model_dir)
    second = loraplex(env, "base-models", "pull", NAME, str(dest))
    assert second.returncode == 0, second.stderr
    assert "already holds a complete copy" in second.stdout
    assert "fetched 0 files, 0 bytes" in second.stdout


def test_pulling_a_model_not_in_the_store_exits_non_zero_saying_so(
    env: dict[str, str], model_dir: Path, tmp_path: Path
) -> None:
    pushed(env, model_dir)  # the bucket exists; this name does not
    result = loraplex(env, "base-models", "pull", "Llama-9-70B", str(tmp_path / "m"))
    assert result.returncode != 0
    assert "base model 'Llama-9-70B' is not in the object store" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_invalid_name_is_refused_before_anything_is_read(
    env: dict[str, str], tmp_path: Path
) -> None:
    result = loraplex(env, "base-models", "pull", "../etc", str(tmp_path / "m"))
    assert result.returncode != 0 and "invalid model name '../etc'" in result.stderr


def test_a_pull_killed_midway_then_run_again_completes(
    env: dict[str, str], model_dir: Path, tmp_path: Path
) -> None:
    (model_dir / "model-00002-of-00002.safetensors").write_bytes(os.urandom(48 * MIB))
    pushed(env, model_dir)
    dest = tmp_path / "models" / NAME
    command = [sys.executable, "-m", "loraplex.cli", "base-models", "pull", NAME, str(dest)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "fetched model-00001-of-00002.safetensors" in line:
            break
    partial = wait_for_partial_file(dest)  # the big second shard is coming in
    proc.send_signal(signal.SIGKILL)
    proc.wait(60)
    assert partial is not None and partial.exists(), "no download was caught halfway"
    assert proc.returncode == -signal.SIGKILL
    rerun = loraplex(env, "base-models", "pull", NAME, str(dest))
    assert rerun.returncode == 0, rerun.stderr
    assert "kept 0 files" not in rerun.stdout  # what the killed pull finished was kept
    assert tree(dest) == tree(model_dir)
    hidden = [p.name for p in dest.rglob(".*")]
    assert hidden == [".loraplex-pulled.json"], "a partial download was left behind"
