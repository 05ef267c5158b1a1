"""Warming at upload through a real API process and the SGLang engines: a version that
became ready is fetched where its first request will go before anyone asks for it."""

from __future__ import annotations

import secrets
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from loraplex.bench.server import api_process
from loraplex.settings import Settings
from tests.integration.conftest import FILES, Served, wait_in_rotation

pytestmark = pytest.mark.engine


def test_an_uploaded_version_is_placed_before_its_first_request(
    served: Served, gateway_settings: Settings, tmp_path: Path
) -> None:
    # The suite's processes run with warming off (tests/conftest.py): this one turns it on,
    # with a disk cache of its own beside the session's API process.
    env = replace(gateway_settings, warm_on_upload=True, data_dir=tmp_path).to_env()
    with api_process(env) as (url, _):
        wait_in_rotation(url, served.operator(), list(served.engine_ids.values()))
        name = f"warm-{secrets.token_hex(3)}"
        folder = served.adapters[8][1]
        adapters = f"{url}/api/v1/tenants/{served.tenant_id}/adapters"
        with httpx.Client(headers=served.headers(), timeout=60) as http:
            assert http.post(adapters, json={"name": name, "base_model": served.base}).is_success
            files = [("file", (n, (folder / n).read_bytes())) for n in FILES]
            uploaded = http.post(f"{adapters}/{name}/versions", files=files)
            assert uploaded.status_code == 201, uploaded.text
            version_id = uploaded.json()["id"]

            placed = _placed(url, served.operator(), version_id, timeout_s=60)

            assert placed is not None, "the new version was never fetched ahead of a request"
            assert placed["heat"] == 0  # nobody asked for it yet
            asked = http.post(
                f"{url}/v1/chat/completions",
                json={"model": name, "messages": [{"role": "user", "content": "Hi"}],
                      "max_tokens": 4},
            )  # fmt: skip
            assert asked.status_code == 200, asked.text


def _placed(url: str, ops: dict[str, str], version_id: str, timeout_s: float) -> dict | None:
    """The version's row in the placement map once it is on a disk or in memory."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        placement = httpx.get(f"{url}/api/v1/placement", headers=ops, timeout=10).json()
        for row in placement["versions"]:
            if row["version_id"] == version_id and row["best"] in ("disk", "loaded", "active"):
                return dict(row)
        time.sleep(0.5)
    return None
