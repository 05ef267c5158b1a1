"""Plain values the policy core reasons about: tiers, adapter versions, nodes, requests."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

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


class Clock(Protocol):
    """The only source of time the policy sees, so the simulator can drive it."""

    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...


@dataclass(slots=True)
class ManualClock:
    """A clock that moves only when told to; for tests and the simulator."""

    current: float = 0.0

    def now(self) -> float:
        """The time last set."""
        return self.current

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.current += seconds


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
        """GPU memory of one slot: SGLang pads every slot to max_lora_rank (reference §4.2)."""
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
