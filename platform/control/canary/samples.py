"""Live prompts kept for a canary's sample eval, only where the tenant opted in to it.

An alias whose analysis policy has a `sample_eval` (and no other) marks its resolved targets
with a `SampleSpec`; each chat request served through it, on either version, offers its
messages here when it ends. `keep` never waits and never raises: it only appends to a
bounded list in memory (a prompt over `MAX_PROMPT_BYTES`, one with tools or a response
format, one leaving too little context for the sample eval's answer, or one past the
pending bound is simply not kept). `run` adds the pending prompts
to one Redis list per canary every second (RPUSH then LTRIM to the sample size, so the list
holds the first prompts served and never more), shared by every API replica; a failed write
is logged and dropped. Once a replica sees a list full it writes to it no more.

The list's key names the alias and the canary's start, so a new canary starts a new sample;
the analyst deletes it when it decides, and it expires on its own otherwise.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
from redis.asyncio import Redis

from loraplex.control.canary.flushing import FlushLoop

log = logging.getLogger("loraplex.canary.samples")

KEY_PREFIX = "loraplex:canary:prompts:"
MAX_PROMPT_BYTES = 16 * 1024  # a longer conversation is not kept (never cut: that changes it)
MAX_PENDING = 1000  # prompts waiting for the next flush, over all aliases
# A list's life after its last write (the analyst starts the sample eval's runs within a
# pass of the list filling, and deletes it when it decides; a canary ended by hand leaves it
# to expire). A replica that saw a list full writes to it no more for as long.
TTL_S = 900


@dataclass(frozen=True, slots=True)
class SampleSpec:
    """Where an opted-in canary's prompts go, how many it keeps, and the answer's bound
    its sample eval asks for (a prompt must leave that much of the context)."""

    key: str
    size: int
    max_tokens: int


def sample_key(alias_id: UUID, canary_started_at: datetime) -> str:
    """The Redis list of one canary's kept prompts."""
    return f"{KEY_PREFIX}{alias_id.hex}:{int(canary_started_at.timestamp() * 1000)}"


def sample_spec(
    alias_id: UUID, canary_started_at: datetime | None, policy: dict[str, Any] | None
) -> SampleSpec | None:
    """The spec of an alias whose canary policy opted in to sampling; None otherwise."""
    sample = (policy or {}).get("sample_eval")
    if not sample or canary_started_at is None:
        return None
    return SampleSpec(
        sample_key(alias_id, canary_started_at),
        int(sample["sample_size"]),
        int(sample.get("max_completion_tokens", 256)),
    )


def keepable(messages: list[dict[str, Any]] | None, options: Any) -> bytes | None:
    """The prompt as stored (JSON of the chat messages), or None when it is not kept: not a
    chat request, one whose answer depends on tools or a response format the sample does not
    keep, or one over `MAX_PROMPT_BYTES`."""
    if messages is None:
        return None
    if options is not None and (options.tools or options.response_format):
        return None
    # the text is most of a prompt: a long one is refused before anything is encoded
    if sum(len(str(m.get("content") or "")) for m in messages) > MAX_PROMPT_BYTES:
        return None
    encoded = msgspec.json.encode(messages)
    return encoded if len(encoded) <= MAX_PROMPT_BYTES else None


class PromptSampler:
    """Keeps opted-in canaries' prompts: in memory on the hot path, in Redis every second."""

    def __init__(self, redis: Redis, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._redis = redis
        self._clock = clock
        self._pending: list[tuple[SampleSpec, bytes]] = []
        self._per_key: Counter[str] = Counter()  # pending prompts per list
        self._full_until: dict[str, float] = {}
        self._loop = FlushLoop(self.flush, "canary prompt samples")

    def keep(self, spec: SampleSpec, request: Any, room: int) -> None:
        """Offer one served request's prompt (a GenerateRequest; `room`: the context its
        prompt left) (event loop only; never raises, never waits)."""
        try:
            if self._full_until.get(spec.key, 0.0) > self._clock() or room < spec.max_tokens:
                return
            if len(self._pending) >= MAX_PENDING or self._per_key[spec.key] >= spec.size:
                return
            prompt = keepable(request.messages, request.options)
            if prompt is not None:
                self._pending.append((spec, prompt))
                self._per_key[spec.key] += 1
        except Exception:  # a prompt not kept must never fail the request that offered it
            log.warning("canary prompt sample not kept", exc_info=True)

    async def flush(self) -> None:
        """Add the pending prompts to their lists; on failure they are dropped (logged)."""
        pending, self._pending, self._per_key = self._pending, [], Counter()
        if not pending:
            return
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for spec, prompt in pending:
                    pipe.rpush(spec.key, prompt)
                    pipe.ltrim(spec.key, 0, spec.size - 1)
                    pipe.expire(spec.key, TTL_S)
                replies = await pipe.execute()
        except Exception:
            log.warning("%d canary prompt samples dropped", len(pending), exc_info=True)
            return
        now = self._clock()
        self._full_until = {k: t for k, t in self._full_until.items() if t > now}
        for (spec, _), length in zip(pending, replies[::3], strict=True):
            if int(length) >= spec.size:
                self._full_until[spec.key] = now + TTL_S

    async def run(self) -> None:
        """Write to Redis every second until `stop()`."""
        await self._loop.run()

    async def stop(self) -> None:
        """End `run()` after one more write."""
        await self._loop.stop()

    async def count(self, key: str) -> int:
        """Prompts kept in the list."""
        return int(await self._redis.llen(key))

    async def read(self, key: str, size: int) -> list[list[dict[str, Any]]]:
        """The first `size` kept prompts, each a list of chat messages."""
        return [msgspec.json.decode(raw) for raw in await self._redis.lrange(key, 0, size - 1)]

    async def drop(self, key: str) -> None:
        """Forget a canary's kept prompts (it was decided)."""
        await self._redis.delete(key)
