"""Changes to who may call and how much, announced when their transaction commits.

The hot path caches two things a few seconds: API keys (`KeyAuthenticator`) and tenant
limits (`TenantLimits`). A service that changes what they cache — revokes a key, suspends or
deletes a tenant, sets a quota, edits a plan — calls `announce(session, ...)`. Nothing is
delivered until that session commits (a rollback drops it), so a cache never forgets a
change that did not happen, and every caller — API handler, console, CLI — has the same
effect, because the service does it, not the handler. (A process that runs no feed, such
as a Celery worker today, announces to nobody: the caches then expire within seconds.)

On commit every running `ChangeFeed` in this process hears the change at once and publishes
it on a Redis channel; the feeds of the other replicas drop their copies within a round trip.
A replica that was cut off from Redis may miss a message: on reconnecting it drops all it
caches, and in any case its caches expire on their own within seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import event
from sqlalchemy.orm import Session

log = logging.getLogger("loraplex.changes")

CHANNEL = "loraplex:changes"
RECONNECT_S = 1.0
PUBLISH_TIMEOUT_S = 2.0  # a Redis that does not answer must not hold up a commit's caller
_PENDING = "loraplex.changes"  # the key of a session's not yet committed announcements


class Change(StrEnum):
    """What changed; each cache listens for the kinds that make its copies wrong."""

    KEY_REVOKED = "key_revoked"  # subject: the key's prefix
    TENANT_ACCESS = "tenant_access"  # a tenant suspended, resumed or deleted
    TENANT_LIMITS = "tenant_limits"  # a tenant's quota or plan, or a plan's limits
    ENGINE_STATE = "engine_state"  # an agent's engine drained, went down or up; new secret
    BUDGETS = "budgets"  # a price, or a tenant's budgets


@dataclass(frozen=True)
class Announcement:
    change: Change
    subject: str = ""


Listener = Callable[[Announcement], None]
EVERYTHING = (Announcement(Change.TENANT_ACCESS), Announcement(Change.TENANT_LIMITS))


def announce(session: Any, change: Change, subject: str = "") -> None:
    """Deliver `change` to every cache once `session` (sync or async) commits."""
    session.info.setdefault(_PENDING, []).append(Announcement(change, subject))


class ChangeFeed:
    """Delivers committed announcements to this process's listeners and to other replicas.

    Without a Redis client (tests, one-off tools) it delivers within the process only.
    """

    def __init__(self, redis: Redis | None, channel: str = CHANNEL):
        self._redis, self._channel = redis, channel
        self._origin = uuid.uuid4().hex  # our own messages come back; skip them
        self._listeners: list[Listener] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._subscriber: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def listen(self, listener: Listener) -> None:
        """Call `listener` with every announcement, from this process or another."""
        self._listeners.append(listener)

    async def start(self, *, subscribe: bool = True) -> None:
        """Hear this process's commits; with `subscribe`, hear other replicas' too."""
        self._loop = asyncio.get_running_loop()
        _RUNNING.add(self)
        if subscribe and self._redis is not None:
            self._subscriber = asyncio.create_task(self._subscribe(), name="change-feed")

    async def stop(self) -> None:
        """Stop hearing, and finish publishing what was committed."""
        _RUNNING.discard(self)
        if self._subscriber is not None:
            self._subscriber.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._subscriber
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def committed(self, announcements: list[Announcement]) -> None:
        """Deliver here at once; publish to the other replicas in the background.

        The feed, its listeners and its Redis connections belong to the loop it started on;
        a commit made on another loop or thread hands the announcements over to that loop.
        """
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:  # a synchronous session, outside any loop
            here = None
        if self._loop is not None and here is not self._loop:
            with contextlib.suppress(RuntimeError):  # that loop has closed: nobody to tell
                self._loop.call_soon_threadsafe(self.committed, announcements)
            return
        self._deliver(announcements)
        if self._redis is None or here is None:
            return
        task = here.create_task(self._publish(announcements))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _deliver(self, announcements: tuple[Announcement, ...] | list[Announcement]) -> None:
        for announcement in announcements:
            for listener in self._listeners:
                listener(announcement)

    async def _publish(self, announcements: list[Announcement]) -> None:
        assert self._redis is not None
        message = {
            "origin": self._origin,
            "changes": [[a.change.value, a.subject] for a in announcements],
        }
        try:
            async with asyncio.timeout(PUBLISH_TIMEOUT_S):
                await self._redis.publish(self._channel, json.dumps(message))
        except Exception as exc:  # the others' caches expire on their own within seconds
            log.warning("could not publish cache changes: %s", exc)

    async def _subscribe(self) -> None:
        assert self._redis is not None
        first = True
        while True:
            try:
                async with self._redis.pubsub() as pubsub:
                    await pubsub.subscribe(self._channel)
                    if not first:  # we may have missed announcements while away
                        self._deliver(EVERYTHING)
                    first = False
                    async for message in pubsub.listen():
                        self._heard(message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("change feed lost Redis (%s); retrying in %.0f s", exc, RECONNECT_S)
                first = False
                await asyncio.sleep(RECONNECT_S)

    def _heard(self, message: dict[str, Any]) -> None:
        if message.get("type") != "message":
            return
        try:
            body = json.loads(message["data"])
            if body["origin"] == self._origin:
                return
            announcements = [Announcement(Change(c), str(s)) for c, s in body["changes"]]
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed change message")
            return
        self._deliver(announcements)


_RUNNING: weakref.WeakSet[ChangeFeed] = weakref.WeakSet()


# Both hooks also fire for savepoints: those are left alone, so what a savepoint announced
# waits for the outer commit (a rolled-back savepoint's announcement then only costs a
# needless reload), and the outer transaction's announcements survive a savepoint rollback.
@event.listens_for(Session, "after_commit")
def _after_commit(session: Session) -> None:
    if session.in_nested_transaction():
        return
    pending = session.info.pop(_PENDING, None)
    if pending:
        for feed in list(_RUNNING):
            feed.committed(pending)


@event.listens_for(Session, "after_rollback")
def _after_rollback(session: Session) -> None:
    if not session.in_nested_transaction():
        session.info.pop(_PENDING, None)
