"""The first-run demo: a tenant with logins, a key, three trained adapters and a training file.

Made once, through the platform's own HTTP API (so it is exactly what a tenant could do),
and every step first looks whether it is already done: a first run killed half-way is
finished by the next one, and a second run changes nothing. Secrets are generated once
and kept, readable only by their owner, in `<data_dir>/credentials.json`.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from loraplex.dev.corpus import adapter_examples
from loraplex.up.layout import BASE_MODEL, Layout

TENANT = "demo"
TRAINING_FILE = "demo-chat.jsonl"
TRAINING_SEED = 77  # a persona none of the demo adapters has, so a fine-tune shows something
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


@dataclass(frozen=True)
class DemoAdapter:
    """One demo adapter: trained on the examples of `seed`, at `rank`."""

    rank: int
    seed: int

    @property
    def persona(self) -> str:
        """The name it answers "What is your name?" with, which is also its adapter name."""
        answer = dict(adapter_examples(self.seed))["What is your name?"]
        return answer.removeprefix("My name is ").rstrip(".").lower()

    @property
    def model(self) -> str:
        """The model id a client sends."""
        return f"{self.persona}@prod"


# Three rank classes; seeds chosen so each answers with a different name and code word.
ADAPTERS = (DemoAdapter(8, 8), DemoAdapter(16, 16), DemoAdapter(64, 64))
QUESTION = "What is your name?"


@dataclass
class Credentials:
    """The demo's logins and key, as printed and as kept in the data dir."""

    operator_email: str
    operator_password: str
    admin_email: str
    admin_password: str
    api_key: str = ""
    tenant_id: str = ""

    @classmethod
    def load_or_make(cls, path: Path) -> Credentials:
        """The kept credentials, or new ones written (owner-only) before anything uses them."""
        if path.exists():
            return cls(**json.loads(path.read_text()))
        made = cls(
            operator_email="operator@loraplex.localhost",
            operator_password=secrets.token_urlsafe(12),
            admin_email="admin@demo.localhost",
            admin_password=secrets.token_urlsafe(12),
        )
        made.save(path)
        return made

    def save(self, path: Path) -> None:
        """Write (or rewrite) the file, readable only by its owner."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(self), out, indent=2)
        partial.replace(path)


class DemoSeeder:
    """Brings the demo tenant to its full state, step by step, skipping what exists."""

    def __init__(self, api_url: str, operator_key: str, layout: Layout, credentials: Credentials):
        self.layout, self.credentials = layout, credentials
        self.ops = httpx.Client(
            base_url=api_url, headers={"Authorization": f"Bearer {operator_key}"}, timeout=120
        )

    def close(self) -> None:
        """Close the HTTP client."""
        self.ops.close()

    def register_base_model(self) -> None:
        """Register the generated model under its folder's name (once)."""
        from loraplex.adapters.facts import facts_to_json, read_base_model_facts

        model_dir = self.layout.model_dir
        facts = facts_to_json(read_base_model_facts(model_dir, BASE_MODEL))
        body = {**facts, "name": BASE_MODEL, "source": str(model_dir.resolve())}
        _ok(self.ops.post("/api/v1/base-models", json=body), 201, 409)

    def tenant(self) -> str:
        """The demo tenant's id, creating it with its admin login and API key if needed."""
        tenants = _ok(self.ops.get("/api/v1/tenants", params={"limit": 500}))["items"]
        found = next((t for t in tenants if t["slug"] == TENANT), None)
        if found is None:
            body = {"slug": TENANT, "name": "Demo", "plan": "pro"}
            found = _ok(self.ops.post("/api/v1/tenants", json=body), 201)
        tenant_id = str(found["id"])
        user = {
            "email": self.credentials.admin_email,
            "name": "Demo admin",
            "role": "tenant_admin",
            "password": self.credentials.admin_password,
        }
        _ok(self.ops.post(f"/api/v1/tenants/{tenant_id}/users", json=user), 201, 409)
        if not self.credentials.api_key or self.credentials.tenant_id != tenant_id:
            key = {"name": "demo", "scopes": ["inference", "fine-tune", "read"]}
            created = _ok(self.ops.post(f"/api/v1/tenants/{tenant_id}/api-keys", json=key), 201)
            self.credentials.api_key, self.credentials.tenant_id = created["key"], tenant_id
            self.credentials.save(self.layout.credentials)
        return tenant_id

    def adapter(self, tenant_id: str, spec: DemoAdapter) -> None:
        """Upload the trained adapter as version 1 and point `prod` at it (each once)."""
        folder = adapter_dir(self.layout, spec)
        path = f"/api/v1/tenants/{tenant_id}/adapters"
        _ok(self.ops.post(path, json={"name": spec.persona, "base_model": BASE_MODEL}), 201, 409)
        versions = _ok(self.ops.get(f"{path}/{spec.persona}/versions"))["items"]
        if not versions:
            files = [("file", (n, (folder / n).read_bytes())) for n in ADAPTER_FILES]
            _ok(self.ops.post(f"{path}/{spec.persona}/versions", files=files), 201)
        alias = f"{path}/{spec.persona}/aliases/prod"
        if self.ops.get(alias).status_code == 404:
            _ok(self.ops.put(alias, json={"version": 1}))

    def training_file(self) -> None:
        """Upload the demo's chat JSONL file for the tenant (once)."""
        tenant = {"Authorization": f"Bearer {self.credentials.api_key}"}
        files = _ok(self.ops.get("/v1/files", headers=tenant))["data"]
        if any(f["filename"] == TRAINING_FILE for f in files):
            return
        data = training_jsonl()
        (self.layout.demo_dir / TRAINING_FILE).write_text(data)
        upload = {"file": (TRAINING_FILE, data.encode(), "application/jsonl")}
        response = self.ops.post(
            "/v1/files", headers=tenant, files=upload, data={"purpose": "fine-tune"}
        )
        _ok(response)


def adapter_dir(layout: Layout, spec: DemoAdapter) -> Path:
    """Where a demo adapter's trained files are kept."""
    return layout.demo_dir / "adapters" / f"{spec.persona}-r{spec.rank}"


def training_jsonl() -> str:
    """OpenAI chat fine-tuning rows teaching a persona none of the demo adapters has."""
    rows = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for q, a in adapter_examples(TRAINING_SEED)
    ]
    return "".join(json.dumps(row) + "\n" for row in rows)


def train_adapter(spec: DemoAdapter, model_dir: Path, out_dir: Path, log: Path) -> None:
    """Train one demo adapter in a child process (torch stays out of `up`), atomically."""
    if (out_dir / ADAPTER_FILES[1]).exists():
        return
    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # a run killed mid-training left this
    command = [sys.executable, "-m", "loraplex.cli", "dev", "make-adapter", str(partial),
               "--base", str(model_dir), "--base-name", BASE_MODEL, "--rank", str(spec.rank),
               "--seed", str(spec.seed)]  # fmt: skip
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=True)
    partial.replace(out_dir)


class SeedError(RuntimeError):
    """The API refused a demo step."""


def _ok(response: httpx.Response, *statuses: int) -> Any:
    """The JSON body of a response with an expected status (default 200)."""
    if response.status_code not in (statuses or (200,)):
        raise SeedError(
            f"{response.request.method} {response.request.url.path} answered "
            f"{response.status_code}: {response.text[:300]}"
        )
    return response.json() if response.content else None
