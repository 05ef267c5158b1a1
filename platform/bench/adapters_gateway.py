"""The gateway `loraplex bench adapters` serves two of its ways through: the API process on
engines of rank classes 16 and 64, adapters uploaded through the API into an S3 server (moto),
admission's shedding off, and the bench's two tenants (the scanner is the second)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loraplex.bench.adapters_replay import SendFor, chat_body, replay
from loraplex.bench.adapters_setup import (
    EngineSlots,
    engines,
    gateway_loads,
    settled_loads,
    upload_adapters,
)
from loraplex.bench.adapters_trace import BenchRequest, is_scan
from loraplex.bench.api import operator_key
from loraplex.bench.gateway import _setup
from loraplex.bench.overload import UNLIMITED
from loraplex.bench.server import api_process, without_shedding
from loraplex.bench.tenants import new_tenant
from loraplex.bench.upload import moto_server, s3_env
from loraplex.serving.engines.launcher import EngineConfig
from loraplex.serving.simulator.workload import Workload
from loraplex.settings import Settings

CHAT = "/v1/chat/completions"
# Uploads are warmed by the gateway's placement loop, which looks every few seconds
# (LORAPLEX_ENGINE_HEALTH_INTERVAL_S): no new load for this long means warming is over.
WARM_QUIET_S = 6.0


@dataclass
class BenchGateway:
    """The API process, its engines and the bench's two tenants."""

    url: str
    operator: str
    tenants: dict[bool, tuple[str, str]]  # is the scanner -> (tenant id, key)
    served_model: str
    # The floor behind the gateway gets engines of its own (the same weights under another
    # name, so another pool): on the Loraplex way's engines, its adapters took host slots
    # from that way between windows, and the loads that cost were charged to Loraplex.
    floor_model: str
    workdir: Path

    def floor_copies(self, folders: list[Path]) -> list[Path]:
        """Copies of `folders` whose config names the floor's model as their base (an
        upload naming another base model than its config is refused)."""
        copies = []
        for folder in folders:
            copy = self.workdir / "floor-adapters" / folder.name
            if not copy.exists():
                shutil.copytree(folder, copy)
                config_path = copy / "adapter_config.json"
                config = json.loads(config_path.read_text())
                config["base_model_name_or_path"] = self.floor_model
                config_path.write_text(json.dumps(config, indent=2))
            copies.append(copy)
        return copies

    def warm_up(self) -> None:
        """One request to the base model through the gateway (its first-use costs)."""
        request = BenchRequest(0.0, 0, "Hello?", "Hello?", False)
        body = chat_body(self.served_model, request, 4)
        key = self.tenants[False][1]
        asyncio.run(replay(self.url + CHAT, [request], lambda _: (_auth(key), body)))

    def upload(
        self, prefix: str, count: int, workload: Workload, base: str, folders: list[Path]
    ) -> dict[str, float]:
        """Adapters 0..count-1 under the names `{prefix}{i}`, each owned by the scanner when
        the workload says it is one of the scan's. Returns once the loads the uploads set
        off (placement warms each new version) have ended: what they loaded, by tier."""
        names = [f"{prefix}{i}" for i in range(count)]
        owners = [self.tenants[is_scan(workload, i)][0] for i in range(count)]
        before = gateway_loads(self.url)
        upload_adapters(self.url, self.operator, base, owners, names, folders[:count])
        after = settled_loads(self.url, quiet_s=WARM_QUIET_S)
        return {tier: after[tier] - before.get(tier, 0.0) for tier in after}

    def sender(self, prefix: str, workload: Workload, max_tokens: int) -> SendFor:
        """How a request to adapter `i` is sent: to `{prefix}{i}`, as its owner tenant."""

        def send(r: BenchRequest) -> tuple[dict[str, str], dict[str, Any]]:
            key = self.tenants[is_scan(workload, r.adapter)][1]
            return _auth(key), chat_body(f"{prefix}{r.adapter}", r, max_tokens)

        return send


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# The engines' ports, by base model and rank class: apart from the shared dev and test
# engines' (8100-8121) and the plain way's.
PORTS = {(False, 16): 8143, (False, 64): 8144, (True, 16): 8145, (True, 64): 8146}


def start_gateway(
    stack: contextlib.ExitStack, settings: Settings, gpu_slots: int, host_slots: int, root: Path
) -> BenchGateway:
    """The gateway on rank classes 16 and 64, adapters from S3 (moto), shedding off; what it
    started is stopped when `stack` closes."""
    operator = operator_key(settings)
    floor_dir = _renamed(EngineConfig().model_dir, root / "floor-model", "-floor")
    specs = [
        EngineSlots(
            f"{'floor' if floor else 'loraplex'}-r{rank}", port, rank, gpu_slots, host_slots,
            floor_dir if floor else None,
        )
        for (floor, rank), port in PORTS.items()
    ]  # fmt: skip
    endpoint = stack.enter_context(moto_server())
    env = {
        **without_shedding(settings).to_env(),
        **s3_env(endpoint, f"bench-{secrets.token_hex(3)}"),
        "LORAPLEX_DATA_DIR": str(root / "api"),
    }
    url, _ = stack.enter_context(api_process(env))
    started = stack.enter_context(engines(specs, root))
    for config, info in started:
        _setup(url, operator, config, info.served_model)
    tenants = {
        False: new_tenant(url, operator, plan="enterprise", **UNLIMITED),
        True: new_tenant(url, operator, plan="enterprise", **UNLIMITED),  # the scanner
    }
    return BenchGateway(url, operator, tenants, started[0][1].served_model, floor_dir.name, root)


def _renamed(model_dir: Path, parent: Path, suffix: str) -> Path:
    """`model_dir` seen under another folder name (a link): an engine serves a model by its
    folder's name, and the gateway keeps one pool of engines per served model."""
    link = parent / f"{model_dir.name}{suffix}"
    if not link.exists():
        parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(model_dir.resolve(), target_is_directory=True)
    return link
