"""The engines of one pool as the admission core follows them: the requests each holds, the
prompts each has without a first token, and the engine a request would go to.

The engine a request goes to is the live router's choice (`EngineRouter.ordered`, the path
without placement): among the engines that can serve it, those of the smallest rank class,
and of those the one with the fewest requests in flight, ties to the first in its order.
The core models the same choice over its own counts, and hears the router's real choice
(`Routed`) where it differs, for instance where adapter placement put the request on the
engine that holds its adapter.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from loraplex.gateway.admission.core.events import PoolEngine

LONE = ""  # the name of the one engine of a pool reported whole


@dataclass(frozen=True, slots=True)
class Prompt:
    """An admitted request without a first token yet."""

    tokens: int
    due: float  # when its first token is due
    starts_at: float  # when its prefill step starts at the latest (the step ahead ends)


@dataclass(slots=True)
class EngineState:
    """One engine as the core follows it."""

    places: int
    rank: int = 0  # the router's first sort key (PoolEngine.rank)
    requests: set[str] = field(default_factory=set)
    prefilling: dict[str, Prompt] = field(default_factory=dict)

    @property
    def has_room(self) -> bool:
        return len(self.requests) < self.places


class PoolEngines:
    """Each engine's requests and prompts; an engine that leaves the pool keeps what it
    holds, with no places, until its requests end."""

    def __init__(self, places: int) -> None:
        self._engines: dict[str, EngineState] = {LONE: EngineState(places)}
        self._engine_of: dict[str, str] = {}  # request -> its engine
        self._told: set[str] = {LONE}  # the engines of the last report

    def report(self, places: int, engines: tuple[PoolEngine, ...]) -> None:
        """The engines and their places now (none named: one engine of `places`)."""
        told = {e.engine: e for e in engines} if engines else {LONE: PoolEngine(LONE, places)}
        held, self._told = self._engines, set(told)
        self._engines = {name: held.get(name) or EngineState(0) for name in told}
        for name, engine in told.items():
            self._engines[name].places = max(0, engine.places)
            self._engines[name].rank = engine.rank
        for name, state in held.items():
            if name not in told and state.requests:
                state.places = 0
                self._engines[name] = state

    def engine(self, name: str) -> EngineState | None:
        return self._engines.get(name)

    def chosen(self) -> tuple[str, EngineState]:
        """The engine the router would send a request to now: of the smallest rank, the
        fewest requests among those with room, ties to the first reported (with no room
        there, the fewest: the router does not look at room)."""
        order = {name: i for i, name in enumerate(self._engines)}

        def key(name: str) -> tuple[int, bool, int, int]:
            state = self._engines[name]
            return (state.rank, not state.has_room, len(state.requests), order[name])

        name = min(self._engines, key=key)
        return name, self._engines[name]

    def add(self, request_id: str, engine: str, prompt: Prompt) -> None:
        state = self._engines[engine]
        state.requests.add(request_id)
        state.prefilling[request_id] = prompt
        self._engine_of[request_id] = engine

    def move(self, request_id: str, engine: str, starts_at: float) -> bool:
        """Move a request to the engine the router chose (its prompt, if still without a
        first token, starts after that engine's step in progress, `starts_at`); whether it
        moved."""
        before = self._engine_of.get(request_id)
        if before is None or before == engine or engine not in self._engines:
            return False
        old = self._engines[before]
        old.requests.discard(request_id)
        prompt = old.prefilling.pop(request_id, None)
        self._drop_if_gone(before)
        state = self._engines[engine]
        state.requests.add(request_id)
        if prompt is not None:
            state.prefilling[request_id] = Prompt(prompt.tokens, prompt.due, starts_at)
        self._engine_of[request_id] = engine
        return True

    def first_token(self, request_id: str) -> None:
        engine = self._engine_of.get(request_id)
        if engine is not None:
            self._engines[engine].prefilling.pop(request_id, None)

    def finish(self, request_id: str) -> None:
        engine = self._engine_of.pop(request_id, None)
        if engine is None:
            return
        state = self._engines[engine]
        state.requests.discard(request_id)
        state.prefilling.pop(request_id, None)
        self._drop_if_gone(engine)

    def prefilling(self) -> Iterator[Prompt]:
        """Every prompt of the pool without a first token."""
        for state in self._engines.values():
            yield from state.prefilling.values()

    def prefilling_count(self) -> int:
        return sum(len(state.prefilling) for state in self._engines.values())

    def holding(self) -> dict[str, int]:
        """Each engine's requests, by name."""
        return {name: len(state.requests) for name, state in self._engines.items()}

    def _drop_if_gone(self, engine: str) -> None:
        state = self._engines[engine]
        if engine not in self._told and not state.requests:
            del self._engines[engine]
