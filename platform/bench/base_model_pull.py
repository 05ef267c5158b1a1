"""`loraplex bench base-model-pull`: what an engine node's start pays for its base model.

For a folder shaped like the dev model (~15 MB) and a larger one (`--size-mb`), on the local
store and on S3 (moto's server on loopback): the push,
the first pull into an empty folder, the second (a restart: marker and sizes only), a
`--verify` pull (every byte hashed), and as the baseline in the same run the store's plain
downloads of the same files (no manifest, no checks of the folder, no fsync).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from loraplex.adapters.store import LocalStore, S3Store
from loraplex.adapters.store.base import ObjectStore
from loraplex.bench.upload import moto_server
from loraplex.control.base_models.manifest import file_key
from loraplex.control.base_models.pull import pull_model
from loraplex.control.base_models.push import push_model
from loraplex.control.base_models.store_objects import format_bytes

MB = 1000 * 1000
SMALL_FILES = {"config.json": 745, "generation_config.json": 102, "tokenizer.json": 47_123,
               "tokenizer_config.json": 2_317}  # fmt: skip


@dataclass(frozen=True)
class Row:
    """One model on one store: seconds of each step, and bytes fetched by the pulls."""

    model: str
    store: str
    files: int
    bytes: int
    push_s: float
    baseline_download_s: float
    first_pull_s: float
    first_pull_bytes: int
    second_pull_s: float
    second_pull_bytes: int
    verify_pull_s: float


def make_folder(root: Path, shards: int, shard_bytes: int) -> Path:
    """A model folder: `shards` random weight files and the small files a model has."""
    root.mkdir(parents=True, exist_ok=True)
    for index in range(shards):
        with open(root / f"model-{index + 1:05d}-of-{shards:05d}.safetensors", "wb") as out:
            for _ in range(shard_bytes // MB):
                out.write(os.urandom(MB))
            out.write(os.urandom(shard_bytes % MB))
    for name, size in SMALL_FILES.items():
        (root / name).write_bytes(os.urandom(size))
    return root


def measure(label: str, store: ObjectStore, where: str, source: Path, work: Path) -> Row:
    """Push `source`, then pull it three ways and download it plainly; time each."""
    quiet = lambda line: None  # noqa: E731 - per-file lines are not the result
    started = time.perf_counter()
    pushed = push_model(store, source, say=quiet)
    push_s = time.perf_counter() - started
    plain = work / "plain"
    plain.mkdir(parents=True)
    started = time.perf_counter()
    for path in sorted(p for p in source.iterdir() if p.is_file()):
        sha256 = store.stat(file_key(source.name, path.name)).sha256
        store.get_file(file_key(source.name, path.name), plain / path.name, sha256)
    baseline_s = time.perf_counter() - started
    dest = work / "models" / source.name
    first = pull_model(store, source.name, dest, say=quiet)
    second = pull_model(store, source.name, dest, say=quiet)
    verify = pull_model(store, source.name, dest, say=quiet, verify=True)
    shutil.rmtree(work)
    return Row(label, where, pushed.files, pushed.bytes, round(push_s, 3), round(baseline_s, 3),
               round(first.seconds, 3), first.fetched_bytes, round(second.seconds, 4),
               second.fetched_bytes, round(verify.seconds, 3))  # fmt: skip


def print_table(rows: list[Row]) -> None:
    """The rows as a table on the terminal."""
    click.echo(f"{'model':<22}{'store':<7}{'size':>10}{'push':>9}{'plain get':>11}"
               f"{'1st pull':>10}{'2nd pull':>10}{'verify':>9}")  # fmt: skip
    for r in rows:
        click.echo(f"{r.model:<22}{r.store:<7}{format_bytes(r.bytes):>10}{r.push_s:>8.2f}s"
                   f"{r.baseline_download_s:>10.2f}s{r.first_pull_s:>9.2f}s"
                   f"{r.second_pull_s:>9.3f}s{r.verify_pull_s:>8.2f}s")  # fmt: skip


@click.command("base-model-pull")
@click.option("--size-mb", type=click.IntRange(16, 20_000), default=500, show_default=True)
@click.option("--workdir", type=click.Path(path_type=Path), default=Path("var/bench/base-models"))
@click.option(
    "--json", "json_path", type=click.Path(path_type=Path),
    default=Path("var/bench/base-model-pull.json"),
)  # fmt: skip
def bench_base_model_pull(size_mb: int, workdir: Path, json_path: Path) -> None:
    """Push and pull base models through each store; print a table and write JSON."""
    shutil.rmtree(workdir, ignore_errors=True)
    models = {
        "dev-model-sized": make_folder(workdir / "src" / "dev-model-sized", 1, 14_693_456),
        f"{size_mb}MB-4-shards": make_folder(
            workdir / "src" / f"{size_mb}MB-4-shards", 4, size_mb * MB // 4
        ),
    }
    rows = []
    for label, source in models.items():
        local = LocalStore(workdir / "objects")
        rows.append(measure(label, local, "local", source, workdir / "work"))
    with moto_server() as endpoint:
        for label, source in models.items():
            store = S3Store(bucket=f"bench-{uuid.uuid4().hex[:8]}", endpoint_url=endpoint,
                            access_key="bench", secret_key="bench", create_bucket=True)  # fmt: skip
            rows.append(measure(label, store, "s3", source, workdir / "work"))
    shutil.rmtree(workdir, ignore_errors=True)
    print_table(rows)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    click.echo(f"wrote {json_path}")
