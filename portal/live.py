"""The web process's side of the live inbox push: one Redis pub/sub subscription per
process, fanned out to every open event stream of that process, keyed by (tenant, user).

A stream holds no Redis connection of its own (a hundred open inboxes are one subscription,
not a hundred connections taken from the sessions' pool), and a message reaches only the
streams of the tenant named by its channel and the users named in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import RedisError

from domain.errors import Busy
from tocsin.messaging.inbox_events import channel_pattern, decode

__all__ = [
    "READY_SECONDS",
    "RECONNECT_SECONDS",
    "STREAM_RETRY_SECONDS",
    "InboxListener",
    "ListenerUnavailable",
    "Watch",
]

log = logging.getLogger("tocsin.live")

READY_SECONDS = 5.0  # a stream waits this long for the subscription before answering 503
RECONNECT_SECONDS = 2.0  # pause between two attempts to subscribe again after Redis failed
STREAM_RETRY_SECONDS = 60  # Retry-After of a stream refused for being one too many


class ListenerUnavailable(Exception):
    """Redis could not be subscribed to: the page falls back to polling."""


class Watch:
    """One open stream's place among the listener's watchers: its event is set whenever a
    message names its reader. Taken when the stream is admitted, given back when it ends
    (or, should the stream never start, when it is dropped)."""

    def __init__(self, listener: InboxListener, key: tuple[str, int]) -> None:
        self.event = asyncio.Event()
        self._listener: InboxListener | None = listener
        self._key = key

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener._forget(self._key, self.event)

    def __del__(self) -> None:
        self.close()


class InboxListener:
    def __init__(
        self, redis_url: str, namespace: str, *, per_user: int = 5, per_process: int = 1000
    ) -> None:
        self._redis_url = redis_url
        self._namespace = namespace
        self._per_user = per_user  # open streams per (tenant, user) in this process
        self._per_process = per_process  # open streams in this process
        self._watchers: dict[tuple[str, int], set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()

    async def start(self) -> None:
        """Subscribe once per process (first stream to open), and wait until subscribed."""
        if self._task is None or self._task.done():
            self._subscribed = asyncio.Event()
            self._task = asyncio.create_task(self._listen(), name="inbox-listener")
        try:
            await asyncio.wait_for(self._subscribed.wait(), READY_SECONDS)
        except TimeoutError:
            raise ListenerUnavailable("the live inbox subscription is not ready") from None

    def admit(self, tenant: str, user_id: int) -> Watch:
        """A place for one more stream of this user of this tenant, or Busy: each stream
        holds a socket and a task for its whole lifetime, so neither one reader (a script
        opening streams in a loop) nor everyone together may open them without bound. The
        check and the taking happen with no await between, so concurrent opens cannot all
        pass it."""
        key = (tenant, user_id)
        if len(self._watchers.get(key, ())) >= self._per_user:
            raise Busy(
                f"you have {self._per_user} live inbox pages open already; this one refreshes "
                "itself every little while instead", retry_after=STREAM_RETRY_SECONDS, own_share=True,
            )
        if self.watching >= self._per_process:
            raise Busy(
                "too many live inbox pages are open right now; this one refreshes itself every "
                "little while instead", retry_after=STREAM_RETRY_SECONDS, own_share=False,
            )
        watch = Watch(self, key)
        self._watchers.setdefault(key, set()).add(watch.event)
        return watch

    @contextlib.contextmanager
    def watch(self, tenant: str, user_id: int) -> Iterator[asyncio.Event]:
        """An event set whenever a message names this user of this tenant."""
        place = self.admit(tenant, user_id)
        try:
            yield place.event
        finally:
            place.close()

    def _forget(self, key: tuple[str, int], event: asyncio.Event) -> None:
        watchers = self._watchers.get(key, set())
        watchers.discard(event)
        if not watchers:
            self._watchers.pop(key, None)

    @property
    def watching(self) -> int:
        """Open streams in this process."""
        return sum(len(events) for events in self._watchers.values())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _dispatch(self, channel_name: str, data: str) -> int:
        """Wake the streams a message names; how many were woken."""
        decoded = decode(self._namespace, channel_name, data)
        if decoded is None:
            return 0
        tenant, users = decoded
        woken = 0
        for user_id in users:
            for event in self._watchers.get((tenant, user_id), ()):
                event.set()
                woken += 1
        return woken

    def _wake_everyone(self) -> None:
        # Messages published while the subscription was down are lost: every open page
        # looks for what it may have missed.
        for events in self._watchers.values():
            for event in events:
                event.set()

    async def _listen(self) -> None:
        first = True
        while True:
            client = AsyncRedis.from_url(self._redis_url, decode_responses=True)
            try:
                async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.psubscribe(channel_pattern(self._namespace))
                    self._subscribed.set()
                    if not first:
                        self._wake_everyone()
                    first = False
                    async for message in pubsub.listen():
                        if message["type"] == "pmessage":
                            self._dispatch(str(message["channel"]), str(message["data"]))
            except (RedisError, OSError) as error:
                log.warning("live inbox subscription lost (%s); pages poll until it is back", error)
                self._subscribed.clear()
            finally:
                await client.aclose()
            await asyncio.sleep(RECONNECT_SECONDS)
