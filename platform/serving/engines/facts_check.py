"""An engine's registration held against what the engine itself reports.

Placement plans with the registered rank class and slots, the gateway speaks the
registered kind's protocol, and tenants' adapters of the registered base model go to it; a
wrong figure fails every tenant request later ("the engine refused the request: Not Found"
for SGLang registered as vLLM), a wrong base model answers them with another model's weights
under adapters trained for it. So registration, by an operator or an agent, is refused with
a 400 naming the first field that disagrees.

The base model matches when the engine serves it under its registered name, or under the
name of the folder it was registered from (its `source`), or was started on a folder of
either name: the suite registers one model folder under several names (a base model names a
pool of engines), and an engine started on `/models/<name>` serves `<name>` by default.

Pure: `problems` compares; the service reads the engine (`EngineDriver.reported_facts`).
"""

from __future__ import annotations

from dataclasses import dataclass

from loraplex.serving.engines.reported_facts import ReportedFacts, folder_name

# vLLM refuses any other --max-lora-rank (docs/engines.md §8).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# The engine flag each claimed figure is, by kind.
FLAGS = {
    "sglang": {
        "max_lora_rank": "--max-lora-rank",
        "gpu_slots": "--max-loras-per-batch",
        "host_slots": "--max-loaded-loras",
    },
    "vllm": {
        "max_lora_rank": "--max-lora-rank",
        "gpu_slots": "--max-loras",
        "host_slots": "--max-cpu-loras",
    },
}


@dataclass(frozen=True, slots=True)
class Claim:
    """What a registration says about its engine."""

    kind: str
    max_lora_rank: int
    gpu_slots: int
    host_slots: int
    base_model: str = ""  # its name; "": not checked (an engine from LORAPLEX_ENGINES)
    base_folder: str = ""  # the last part of the base model's `source`, "" for none

    @classmethod
    def of(
        cls, kind: str, max_lora_rank: int, gpu_slots: int, host_slots: int,
        base_model: str = "", base_source: str = "",
    ) -> Claim:  # fmt: skip
        """A claim whose base model was registered from `base_source` (a path or URI)."""
        folder = folder_name(base_source) if base_model else ""
        return cls(kind, max_lora_rank, gpu_slots, host_slots, base_model, folder)


@dataclass(frozen=True, slots=True)
class Problem:
    """One disagreement: the request field and what is wrong with it."""

    param: str
    message: str


def claim_problems(claim: Claim) -> list[Problem]:
    """What is wrong with a claim on its own, before asking the engine."""
    problems = []
    if claim.host_slots < claim.gpu_slots:
        problems.append(Problem("host_slots", "host_slots must be at least gpu_slots"))
    if claim.kind == "vllm" and claim.max_lora_rank not in VLLM_LORA_RANKS:
        ranks = ", ".join(map(str, VLLM_LORA_RANKS))
        problems.append(
            Problem(
                "max_lora_rank",
                f"vLLM takes a max_lora_rank of {ranks}, not {claim.max_lora_rank}",
            )
        )
    return problems


def problems(claim: Claim, reported: ReportedFacts) -> list[Problem]:
    """Where the claim and the engine's own account disagree (unreported figures pass)."""
    if reported.kind is not None and reported.kind != claim.kind:
        return [
            Problem(
                "kind",
                f"the engine at this url is {_KIND_NAMES[reported.kind]}, not {claim.kind}",
            )
        ]
    found = []
    if reported.lora_enabled is False:
        found.append(Problem("url", "the engine was started without --enable-lora"))
    if claim.base_model and reported.served_models is not None:
        names = {claim.base_model, claim.base_folder} - {""}
        if not names & {*reported.served_models, *reported.model_folders}:
            serves = ", ".join(repr(n) for n in reported.served_models) or "no base model"
            found.append(
                Problem(
                    "base_model",
                    f"base_model is {claim.base_model!r}, but the engine at this url "
                    f"serves {serves}",
                )
            )
    flags = FLAGS.get(claim.kind, FLAGS["sglang"])
    for field in ("max_lora_rank", "gpu_slots", "host_slots"):
        engine_value = getattr(reported, field)
        claimed = getattr(claim, field)
        if engine_value is not None and engine_value != claimed:
            found.append(
                Problem(
                    field,
                    f"{field} is {claimed}, but the engine was started with "
                    f"{flags[field]} {engine_value}",
                )
            )
    return found


_KIND_NAMES = {"sglang": "SGLang (sglang)", "vllm": "vLLM (vllm)"}
