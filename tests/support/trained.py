"""Trained adapters made once per test session.

Training is the slow part of many tests (a minute for the tool-calling adapter on two
cores), and the suite trained the same adapter several times: once per engine kind, again in
the rank-class tests, again in the dev tools' tests. Every dev model is made from a seed
(`make_model(seed=0)` is the same weights in every folder), and training is seeded, so an
adapter trained for one copy of the model is the adapter for every copy: it is trained once
per model content and arguments, and copied.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

_made: dict[tuple[str, str], Path] = {}
_root: Path | None = None


def trained_adapter(
    model_dir: Path, out_dir: Path, *, base_name: str | None = None, **how: Any
) -> Path:
    """`make_adapter(model_dir, out_dir, base_name=base_name, **how)`, trained at most once
    per session for a model of the same content and the same `how`."""
    from loraplex.dev.make_adapter import make_adapter  # torch: only when a test needs it

    key = (_fingerprint(Path(model_dir)), repr(sorted(how.items())))
    made = _made.get(key)
    if made is None:
        made = _made[key] = make_adapter(model_dir, _cache() / f"adapter-{len(_made)}", **how)
    out_dir = Path(out_dir)
    shutil.copytree(made, out_dir, dirs_exist_ok=True)
    config_file = out_dir / "adapter_config.json"
    config = json.loads(config_file.read_text())
    # As make_adapter names it: the registered name, else the model's folder.
    config["base_model_name_or_path"] = base_name or Path(model_dir).resolve().name
    config_file.write_text(json.dumps(config))
    return out_dir


def _fingerprint(model_dir: Path) -> str:
    """The model's weights and config, hashed: equal for every copy of one seeded model."""
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors"):
        with (model_dir / name).open("rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _cache() -> Path:
    global _root
    if _root is None:
        _root = Path(tempfile.mkdtemp(prefix="loraplex-trained-"))
        atexit.register(shutil.rmtree, _root, True)
    return _root
