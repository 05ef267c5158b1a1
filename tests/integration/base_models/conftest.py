"""A store of each kind (the local folder, S3 on the loopback server) and a model folder."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from loraplex.adapters.store import LocalStore, S3Store
from loraplex.adapters.store.base import ObjectStore
from tests.support.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server

MIB = 1024 * 1024


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """An empty object store: a local folder, or a fresh bucket on the loopback S3 server."""
    if request.param == "local":
        return LocalStore(tmp_path / "objects")
    server: S3Server = request.getfixturevalue("s3_server")
    return S3Store(
        bucket=f"models-{uuid.uuid4().hex[:12]}",
        endpoint_url=server.endpoint_url,
        region=REGION,
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        create_bucket=True,
    )


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A model folder as a download leaves it: weights shards, config, tokenizer files."""
    root = tmp_path / "source" / "Tiny-Chat-1B"
    (root / "original").mkdir(parents=True)
    (root / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}\n')
    (root / "generation_config.json").write_text('{"eos_token_id": 2}\n')
    (root / "tokenizer.json").write_bytes(os.urandom(200_000))
    (root / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}\n')
    (root / "model-00001-of-00002.safetensors").write_bytes(os.urandom(3 * MIB))
    (root / "model-00002-of-00002.safetensors").write_bytes(os.urandom(2 * MIB + 7))
    (root / "original" / "params.json").write_text("{}\n")
    return root
