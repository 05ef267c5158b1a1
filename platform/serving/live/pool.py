"""One base model's engines under one policy core, and the requests routed to them.

The policy core knows rank classes but not base models, so each base model gets its own
core: an adapter of one base model can never be placed on an engine serving another.
Engines join and leave the core as they come into and out of rotation; each joining gets a
new epoch, so a request that started on an engine's previous incarnation cannot corrupt
the state of the new one.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from loraplex.serving.policy import (
    Dispatch,
    NodeSpec,
    PolicyConfig,
    PolicyCore,
    Request,
    Tier,
    TierCosts,
)
from loraplex.serving.registry import EngineHandle

SpecOf = Callable[[EngineHandle], NodeSpec]


@dataclass(eq=False)
class SlotClaim:
    """A routed request's claim on a slot of its engine: where the policy sent it and the
    dispatch it waits for. Once dispatched it becomes the caller's `Seat` (placement.py)."""

    request: Request
    node_id: str
    epoch: int
    found: Tier
    routed_at: float
    # The dispatch that releases it to the engine; None when its engine left the rotation.
    future: asyncio.Future[Dispatch | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    running: bool = False  # released to the engine
    abandoned: bool = False  # its caller gave up while it waited
    released: bool = False  # its request finished and the core was told


@dataclass(eq=False)
class _Node:
    handle: EngineHandle
    epoch: int
    spec: NodeSpec


class Pool:
    """The policy core for one base model, its engines, and its routed requests."""

    def __init__(
        self, base_model: str, config: PolicyConfig, costs: TierCosts, spec_of: SpecOf
    ) -> None:
        self.base_model = base_model
        self.core = PolicyCore([], [], costs, config)
        self.spec_of = spec_of
        self.nodes: dict[str, _Node] = {}
        self.claims: dict[int, SlotClaim] = {}
        self._epochs = itertools.count(1)

    def sync(self, healthy: Iterable[EngineHandle]) -> list[EngineHandle]:
        """Make the core's nodes the healthy engines; returns the engines that joined."""
        wanted = {handle.id: handle for handle in healthy}
        for node_id, node in list(self.nodes.items()):
            handle = wanted.get(node_id)
            if handle is None or handle is not node.handle or self.spec_of(handle) != node.spec:
                self.drop(node_id)
        joined = []
        for node_id, handle in wanted.items():
            if node_id not in self.nodes:
                spec = self.spec_of(handle)
                self.core.add_node(spec)
                self.nodes[node_id] = _Node(handle, next(self._epochs), spec)
                joined.append(handle)
        return joined

    def drop(self, node_id: str) -> None:
        """An engine left: forget its state; requests still waiting there must re-route."""
        self.core.remove_node(node_id)
        del self.nodes[node_id]
        for request_id, claim in list(self.claims.items()):
            if claim.node_id == node_id and not claim.running:
                del self.claims[request_id]
                if not claim.future.done():
                    claim.future.set_result(None)

    def fits(self, rank: int) -> bool:
        """Whether some engine in rotation can serve this rank."""
        return any(node.spec.fits(rank) for node in self.nodes.values())

    def handle(self, node_id: str) -> EngineHandle | None:
        """The engine behind a node, while it is in rotation."""
        node = self.nodes.get(node_id)
        return node.handle if node is not None else None

    def epoch(self, node_id: str) -> int | None:
        """The node's current incarnation."""
        node = self.nodes.get(node_id)
        return node.epoch if node is not None else None

    def current(self, claim: SlotClaim) -> bool:
        """Whether the claim's engine is still the incarnation it was routed to."""
        return self.epoch(claim.node_id) == claim.epoch
