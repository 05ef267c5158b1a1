"""Parses a PEFT `adapter_config.json` into the few facts serving needs, refusing the rest."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from loraplex.adapters.errors import AdapterRejected, Rejection

REQUIRED_FIELDS = ("peft_type", "r", "lora_alpha", "target_modules")


@dataclass(frozen=True)
class LoraConfig:
    """The parts of a LoRA config that serving depends on."""

    rank: int
    alpha: float
    # Bare projection names (`q_proj`), sorted; dotted PEFT names are cut to their last part.
    target_modules: tuple[str, ...]
    base_model_name: str | None


def parse_lora_config(data: Any) -> LoraConfig:
    """Check the schema and the features engines refuse; return the config's serving facts."""
    if not isinstance(data, dict):
        raise AdapterRejected(Rejection.BAD_CONFIG, "adapter_config.json is not a JSON object")
    for name in REQUIRED_FIELDS:
        if name not in data:
            raise AdapterRejected(Rejection.BAD_CONFIG, f"adapter_config.json has no {name!r}")
    peft_type = data["peft_type"]
    if not isinstance(peft_type, str) or peft_type.upper() != "LORA":
        raise AdapterRejected(
            Rejection.NOT_LORA, f"peft_type is {peft_type!r}; only LORA adapters can be served"
        )
    _refuse_unservable_features(data)
    return LoraConfig(
        rank=_rank(data["r"]),
        alpha=_alpha(data["lora_alpha"]),
        target_modules=_target_modules(data["target_modules"]),
        base_model_name=_base_model_name(data.get("base_model_name_or_path")),
    )


def _refuse_unservable_features(data: dict[str, Any]) -> None:
    """DoRA, extra trained modules, new tokens and per-module ranks: no engine serves them."""
    if data.get("use_dora"):
        raise AdapterRejected(
            Rejection.DORA, "use_dora is true; DoRA adapters cannot be served, train plain LoRA"
        )
    if data.get("modules_to_save"):
        raise AdapterRejected(
            Rejection.MODULES_TO_SAVE,
            f"modules_to_save is {data['modules_to_save']!r}; an adapter may only hold LoRA "
            "weights, not full copies of modules",
        )
    if data.get("trainable_token_indices"):
        raise AdapterRejected(
            Rejection.ADDED_TOKENS,
            "trainable_token_indices is set; adapters that train or add tokens cannot be served",
        )
    for name in ("rank_pattern", "alpha_pattern"):
        if data.get(name):
            raise AdapterRejected(
                Rejection.BAD_CONFIG,
                f"{name} is set; engines use one rank and alpha for all modules",
            )


def _rank(value: Any) -> int:
    """`r`: a positive integer."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise AdapterRejected(
            Rejection.BAD_CONFIG, f"r is {value!r}; it must be a positive integer"
        )
    return value


def _alpha(value: Any) -> float:
    """`lora_alpha`: a finite positive number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise AdapterRejected(Rejection.BAD_CONFIG, f"lora_alpha is {value!r}; it must be a number")
    if value <= 0:
        raise AdapterRejected(Rejection.BAD_CONFIG, f"lora_alpha is {value!r}; it must be positive")
    return float(value)


def _target_modules(value: Any) -> tuple[str, ...]:
    """A non-empty list of module names, reduced to bare names.

    PEFT also accepts a regular expression (or `all-linear`) as a string. We refuse that form
    rather than resolve it: evaluating a user's regex on the server invites catastrophic
    backtracking, and the explicit list is what the engines read anyway.
    """
    if isinstance(value, str):
        raise AdapterRejected(
            Rejection.BAD_CONFIG,
            f"target_modules is the pattern {value!r}; list the module names instead, "
            'e.g. ["q_proj", "v_proj"]',
        )
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise AdapterRejected(
            Rejection.BAD_CONFIG, "target_modules must be a non-empty list of module names"
        )
    # PEFT matches `self_attn.q_proj` as a suffix of the full module name; engines (SGLang's
    # get_normalized_target_modules) keep only the last part, and so do we.
    return tuple(sorted({v.rsplit(".", 1)[-1] for v in value}))


def _base_model_name(value: Any) -> str | None:
    """`base_model_name_or_path`, if it is a non-empty string."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise AdapterRejected(Rejection.BAD_CONFIG, "base_model_name_or_path must be a string")
    return value


def names_base_model(declared: str, base_name: str) -> bool:
    """Whether a config's `base_model_name_or_path` is compatible with the base `base_name`.

    A hub id or name must match (its last part may be `base_name`: `org/Model` fits `Model`).
    A local path (absolute, `./`, `~`) tells nothing reliable about the model it held, so it
    is accepted; the tensor shapes are checked against the base model anyway.
    """
    value = declared.strip().replace("\\", "/").rstrip("/").lower()
    base = base_name.strip().lower()
    if value == base or value.endswith("/" + base):
        return True
    is_local_path = value.startswith(("/", ".", "~")) or (len(value) > 1 and value[1] == ":")
    return is_local_path
