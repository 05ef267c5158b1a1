"""`loraplex bench upload`: adapter upload throughput through the API versus boto3 directly.

Both paths write to the same S3 endpoint in the same run (moto's server on loopback unless
`--s3-endpoint` names another). The API path includes streaming the multipart body to disk,
full validation (a pass over every value) and the object-store write; the table also shows
the API process's peak RSS, which must not grow with the file size.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import click
import httpx
import numpy as np
from safetensors.numpy import save_file

from loraplex.bench.api import operator_key
from loraplex.bench.server import api_process, free_port
from loraplex.settings import Settings

HIDDEN, INTERMEDIATE, RANK = 4096, 11008, 64
MODULES = {
    "q_proj": (HIDDEN, HIDDEN),
    "k_proj": (HIDDEN, HIDDEN),
    "v_proj": (HIDDEN, HIDDEN),
    "o_proj": (HIDDEN, HIDDEN),
    "gate_proj": (INTERMEDIATE, HIDDEN),
    "up_proj": (INTERMEDIATE, HIDDEN),
    "down_proj": (HIDDEN, INTERMEDIATE),
}
BYTES_PER_LAYER = sum((o + i) * RANK * 4 for o, i in MODULES.values())


def write_adapter(folder: Path, layers: int) -> Path:
    """A rank-64 adapter on all seven projections of `layers` layers (~20 MB per layer)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    tensors = {}
    for layer in range(layers):
        for module, (out_f, in_f) in MODULES.items():
            group = (
                "self_attn" if module.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
            )
            stem = f"base_model.model.model.layers.{layer}.{group}.{module}"
            tensors[f"{stem}.lora_A.weight"] = (
                rng.standard_normal((RANK, in_f), dtype=np.float32) * 0.01
            )
            tensors[f"{stem}.lora_B.weight"] = np.zeros((out_f, RANK), dtype=np.float32)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA",
        "r": RANK,
        "lora_alpha": 16,
        "target_modules": list(MODULES),
        "base_model_name_or_path": "bench-wide",
        "task_type": "CAUSAL_LM",
    }
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


@contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 server on a free loopback port."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                httpx.get(url, timeout=0.5)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def s3_env(endpoint: str, bucket: str) -> dict[str, str]:
    """The API's environment for an object store at `endpoint` (moto's keys)."""
    return {
        "LORAPLEX_OBJECT_STORE": "s3",
        "LORAPLEX_S3_ENDPOINT_URL": endpoint,
        "LORAPLEX_S3_BUCKET": bucket,
        "LORAPLEX_S3_ACCESS_KEY_ID": "bench",
        "LORAPLEX_S3_SECRET_ACCESS_KEY": "bench",
    }


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _boto3_upload(endpoint: str, bucket: str, path: Path) -> float:
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    started = time.perf_counter()
    client.upload_file(str(path), bucket, f"direct/{path.stat().st_size}/{path.name}")
    return time.perf_counter() - started


def _api_upload(url: str, key: str, tenant_id: str, adapter: str, folder: Path) -> float:
    files = [
        ("file", (n, (folder / n).open("rb"), "application/octet-stream"))
        for n in ("adapter_config.json", "adapter_model.safetensors")
    ]
    started = time.perf_counter()
    response = httpx.post(
        f"{url}/api/v1/tenants/{tenant_id}/adapters/{adapter}/versions",
        files=files,
        headers={"Authorization": f"Bearer {key}"},
        timeout=600,
    )
    elapsed = time.perf_counter() - started
    if response.status_code != 201:
        raise click.ClickException(f"API upload failed: {response.status_code} {response.text}")
    return elapsed


def _setup(url: str, operator: str) -> tuple[str, str]:
    auth = {"Authorization": f"Bearer {operator}"}
    base = {
        "name": "bench-wide",
        "source": "generated://bench-wide",
        "architecture": "LlamaForCausalLM",
        "hidden_size": HIDDEN,
        "num_layers": 64,
        "vocab_size": 32000,
        "max_context": 4096,
        "modules": {m: list(s) for m, s in MODULES.items()},
    }
    httpx.post(f"{url}/api/v1/base-models", json=base, headers=auth)
    slug = f"bench-{secrets.token_hex(4)}"
    tenant = httpx.post(
        f"{url}/api/v1/tenants",
        json={"slug": slug, "name": slug, "plan": "enterprise"},
        headers=auth,
    ).json()
    key = httpx.post(
        f"{url}/api/v1/tenants/{tenant['id']}/api-keys",
        json={"name": "bench", "scopes": ["admin"]},
        headers=auth,
    ).json()["key"]
    return tenant["id"], key


@click.command("upload")
@click.option("--sizes-mb", default="50,200", show_default=True, help="adapter sizes to upload")
@click.option("--s3-endpoint", default="", help="S3 endpoint (default: moto on loopback)")
@click.option("--workdir", type=click.Path(path_type=Path), default=Path("var/bench/upload"))
@click.option(
    "--json", "json_path", type=click.Path(path_type=Path), default=Path("var/bench/upload.json")
)
@click.pass_obj
def bench_upload(
    settings: Settings, sizes_mb: str, s3_endpoint: str, workdir: Path, json_path: Path
) -> None:
    """MB/s of a large adapter upload via the API vs boto3, and the API's peak RSS."""
    operator = operator_key(settings)
    rows = []
    with moto_server() if not s3_endpoint else _given(s3_endpoint) as endpoint:
        bucket = f"bench-{secrets.token_hex(3)}"
        env = {
            **settings.to_env(),
            **s3_env(endpoint, bucket),
            "LORAPLEX_MAX_UPLOAD_BYTES": str(2**31),
            "LORAPLEX_DATA_DIR": str(workdir / "api"),
        }
        with api_process(env) as (url, pid):
            tenant_id, key = _setup(url, operator)
            idle_rss = peak_rss_mb(pid)
            for size in [int(s) for s in sizes_mb.split(",")]:
                layers = max(1, round(size * 2**20 / BYTES_PER_LAYER))
                folder = write_adapter(workdir / f"adapter-{size}", layers)
                nbytes = (folder / "adapter_model.safetensors").stat().st_size
                direct_s = _boto3_upload(endpoint, bucket, folder / "adapter_model.safetensors")
                adapter = f"bench-{size}-{secrets.token_hex(2)}"
                httpx.post(
                    f"{url}/api/v1/tenants/{tenant_id}/adapters",
                    json={"name": adapter, "base_model": "bench-wide"},
                    headers={"Authorization": f"Bearer {key}"},
                )
                api_s = _api_upload(url, key, tenant_id, adapter, folder)
                rows.append(
                    {
                        "size_mb": nbytes / 2**20,
                        "boto3_mb_s": nbytes / 2**20 / direct_s,
                        "api_mb_s": nbytes / 2**20 / api_s,
                        "api_peak_rss_mb": peak_rss_mb(pid),
                        "api_idle_rss_mb": idle_rss,
                    }
                )
    _print(rows)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(rows, indent=2))


@contextmanager
def _given(endpoint: str) -> Iterator[str]:
    yield endpoint


def _print(rows: list[dict[str, float]]) -> None:
    click.echo(
        f"{'size MB':>8} {'boto3 MB/s':>11} {'API MB/s':>9} {'API/boto3':>10} "
        f"{'API peak RSS MB':>16}"
    )
    for r in rows:
        click.echo(
            f"{r['size_mb']:8.0f} {r['boto3_mb_s']:11.1f} {r['api_mb_s']:9.1f} "
            f"{r['api_mb_s'] / r['boto3_mb_s']:10.2f} {r['api_peak_rss_mb']:16.0f}"
        )
    if rows:
        click.echo(
            f"API process RSS before any upload: {rows[0]['api_idle_rss_mb']:.0f} MB "
            "(peak is cumulative)"
        )
