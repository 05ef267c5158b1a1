"""Validates an adapter directory against a base model; used for uploads and fine-tune outputs.

Checks run cheapest first: file names, the config and the limits, the safetensors header,
the tensor names and shapes, and last one streaming pass over the values (NaN/Inf) that
also yields the sha256.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from safetensors import SafetensorError, safe_open

from loraplex.adapters.errors import AdapterRejected, Rejection
from loraplex.adapters.facts import PROJECTION_MODULES, BaseModelFacts
from loraplex.adapters.layout import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    canonical_file_name,
    require_files,
)
from loraplex.adapters.peft_config import LoraConfig, names_base_model, parse_lora_config
from loraplex.adapters.safetensors_header import HeaderError, SafetensorsHeader, read_header
from loraplex.adapters.tensor_checks import check_tensors, scan_values

SUPPORTED_TARGET_MODULES = frozenset(PROJECTION_MODULES)
# A PEFT config is ~1 kB of flat JSON; 64 kB leaves room for long README-like fields.
MAX_CONFIG_BYTES = 64 * 1024


@dataclass(frozen=True)
class ValidationLimits:
    """The caps an adapter must fit: the smaller of the tenant's plan and the engines' limits."""

    max_rank: int
    max_bytes: int
    supported_target_modules: frozenset[str] = SUPPORTED_TARGET_MODULES


@dataclass(frozen=True)
class AdapterFacts:
    """What validation learned about a servable adapter.

    `size_bytes` and `sha256` describe adapter_model.safetensors; `config_sha256` the config.
    """

    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    size_bytes: int
    sha256: str
    config_sha256: str
    base_model_name: str | None
    tensor_count: int


def validate_adapter_dir(
    path: Path, base: BaseModelFacts, limits: ValidationLimits
) -> AdapterFacts:
    """Check that `path` holds an adapter servable on `base`; raise AdapterRejected if not."""
    _check_file_names(path)
    weights = path / WEIGHTS_FILE
    size = weights.stat().st_size
    if size > limits.max_bytes:
        raise AdapterRejected(
            Rejection.TOO_LARGE,
            f"{WEIGHTS_FILE} has {size} bytes, over the {limits.max_bytes} limit",
        )
    raw_config = _read_config_bytes(path / CONFIG_FILE)
    config = _parse_config(raw_config)
    check_config_policy(config, base, limits)
    header = _read_weights_header(weights)
    check_tensors(header, config, base)
    return AdapterFacts(
        rank=config.rank,
        alpha=config.alpha,
        target_modules=config.target_modules,
        size_bytes=size,
        sha256=scan_values(weights, header),
        config_sha256=hashlib.sha256(raw_config).hexdigest(),
        base_model_name=config.base_model_name,
        tensor_count=len(header.tensors),
    )


def check_config_policy(config: LoraConfig, base: BaseModelFacts, limits: ValidationLimits) -> None:
    """The config's rank, targets and base model must fit the limits and the base model."""
    unsupported = [m for m in config.target_modules if m not in limits.supported_target_modules]
    if unsupported:
        allowed = ", ".join(sorted(limits.supported_target_modules))
        raise AdapterRejected(
            Rejection.UNSUPPORTED_TARGET,
            f"target_modules {unsupported} cannot be served; supported: {allowed}",
        )
    if config.rank > limits.max_rank:
        raise AdapterRejected(
            Rejection.RANK_TOO_HIGH, f"rank {config.rank} is above the limit of {limits.max_rank}"
        )
    declared = config.base_model_name
    if declared is not None and not names_base_model(declared, base.name):
        raise AdapterRejected(
            Rejection.WRONG_BASE_MODEL,
            f"the adapter was trained on {declared!r}, not on base model {base.name!r}",
        )


def _check_file_names(path: Path) -> None:
    """Only the PEFT pair and a README; pickled weights are named as such."""
    names = []
    for child in path.iterdir():
        # A link could point anywhere on the server; a folder has no business here.
        if child.is_symlink() or not child.is_file():
            raise AdapterRejected(Rejection.EXTRA_FILE, f"{child.name} is not a regular file")
        names.append(canonical_file_name(child.name))
    require_files(names)


def _read_config_bytes(path: Path) -> bytes:
    """The config's bytes, refusing an absurdly large one before reading it."""
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise AdapterRejected(
            Rejection.TOO_LARGE, f"{CONFIG_FILE} is over the {MAX_CONFIG_BYTES}-byte limit"
        )
    return path.read_bytes()


def _parse_config(raw: bytes) -> LoraConfig:
    """JSON-decode and parse the config."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterRejected(
            Rejection.BAD_CONFIG, f"{CONFIG_FILE} is not valid JSON: {exc}"
        ) from exc
    except (RecursionError, ValueError) as exc:  # nesting too deep; an integer too long
        raise AdapterRejected(
            Rejection.BAD_CONFIG, f"{CONFIG_FILE} nests too deep or has too long a number"
        ) from exc
    return parse_lora_config(data)


def _read_weights_header(path: Path) -> SafetensorsHeader:
    """Our own strict header parse, confirmed by the safetensors library the engines use."""
    try:
        header = read_header(path)
        with safe_open(str(path), framework="np"):
            pass
    except HeaderError as exc:
        raise AdapterRejected(Rejection.CORRUPT_SAFETENSORS, str(exc)) from exc
    except SafetensorError as exc:
        raise AdapterRejected(
            Rejection.CORRUPT_SAFETENSORS, f"{WEIGHTS_FILE} cannot be opened: {exc}"
        ) from exc
    return header
