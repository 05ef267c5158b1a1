"""An engine's speed as the simulator models it: a step time fitted to batch composition.

One step of continuous batching runs every sequence in the batch once: the decoding ones
make a token each and the prefilling ones consume up to the step's prefill budget of their
prompt (chunked prefill). Its time is a linear function of what the batch holds, with
non-negative coefficients fitted by `loraplex bench calibrate` (calibration.py):

    step_s = base_s + decode_seq_s x decoding sequences + prefill_token_s x prompt tokens
             + prefill_seq_s x prefilling sequences + adapter_s x distinct adapters
             + rank_s x the distinct adapters' summed ranks

A profile is one engine kind on one machine, stored as JSON (profiles/*.json) with where
its numbers came from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

PROFILES_DIR = Path(__file__).parent / "profiles"
# The step-time terms, in the order the fit's columns take them.
TERMS = ("base_s", "decode_seq_s", "prefill_token_s", "prefill_seq_s", "adapter_s", "rank_s")


@dataclass(frozen=True, slots=True)
class BatchShape:
    """What one step runs: the counts its time depends on."""

    decode_seqs: int = 0
    prefill_tokens: int = 0
    prefill_seqs: int = 0
    adapters: int = 0  # distinct adapters in the batch (the base model not counted)
    rank_sum: int = 0  # their ranks added up

    def features(self) -> tuple[float, ...]:
        """The fit's row for this batch, one value per entry of `TERMS`."""
        return (
            1.0,
            float(self.decode_seqs),
            float(self.prefill_tokens),
            float(self.prefill_seqs),
            float(self.adapters),
            float(self.rank_sum),
        )


@dataclass(frozen=True, slots=True)
class StepCost:
    """Seconds per unit of each term of a step (all non-negative)."""

    base_s: float
    decode_seq_s: float
    prefill_token_s: float
    prefill_seq_s: float = 0.0
    adapter_s: float = 0.0
    rank_s: float = 0.0

    def seconds(self, batch: BatchShape) -> float:
        """How long one step of `batch` takes."""
        return sum(c * x for c, x in zip(self.coefficients(), batch.features(), strict=True))

    def coefficients(self) -> tuple[float, ...]:
        """The costs in the order of `TERMS`."""
        return tuple(getattr(self, name) for name in TERMS)

    def scaled(self, factor: float) -> StepCost:
        """Every step `factor` times as long (0.1: ten times faster)."""
        return StepCost(*(c * factor for c in self.coefficients()))


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """One engine kind's speed and limits, and where the numbers came from."""

    kind: str  # "sglang" | "vllm"
    step: StepCost
    max_running: int = 64  # sequences one batch may hold (SGLang max_running_requests)
    kv_tokens: int = 65_536  # prompt + output tokens the KV cache holds across the batch
    prefill_chunk_tokens: int = 2_048  # prompt tokens one step may prefill (chunked prefill)
    adapter_slots: int = 8  # distinct adapters per batch (--max-loras-per-batch / --max-loras)
    base_takes_a_slot: bool = True  # SGLang counts a base request as one (docs/engines.md §4.5)
    source: dict[str, Any] = field(default_factory=dict)  # command, date, what it was fitted on

    def faster(self, factor: float) -> EngineProfile:
        """The same engine with steps `factor` times as fast (the issue's 10x profile)."""
        note = {**self.source, "scaled": f"steps {factor:g}x faster than {self.name}"}
        return replace(self, step=self.step.scaled(1.0 / factor), source=note)

    @property
    def name(self) -> str:
        """A short label for tables."""
        return str(self.source.get("name", f"{self.kind}"))

    def to_json(self) -> str:
        """The profile as the JSON `load_profile` reads."""
        return json.dumps(asdict(self), indent=2) + "\n"


def profile_from_dict(data: dict[str, Any]) -> EngineProfile:
    """A profile from its JSON object."""
    fields = {k: v for k, v in data.items() if k != "step"}
    return EngineProfile(step=StepCost(**data["step"]), **fields)


def load_profile(name_or_path: str | Path) -> EngineProfile:
    """A committed profile by name (`sglang-cpu`) or any profile file by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILES_DIR / f"{name_or_path}.json"
    return profile_from_dict(json.loads(path.read_text()))
