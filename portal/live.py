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

from tocsin.inbox_events import channel_pattern, decode

log = logging.getLogger("tocsin.live")

READY_SECONDS = 5.0  # a stream waits this long for the subscription before answering 503
RECONNECT_SECONDS = 2.0  # pause between two attempts to subscribe again after Redis failed


class ListenerUnavailable(Exception):
    """Redis could not be subscribed to: the page falls back to polling."""


class InboxListener:
    def __init__(self, redis_url: str, namespace: str) -> None:
        self._redis_url = redis_url
        self._namespace = namespace
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

    @contextlib.contextmanager
    def watch(self, tenant: str, user_id: int) -> Iterator[asyncio.Event]:
        """An event set whenever a message names this user of this tenant."""
        key = (tenant, user_id)
        event = asyncio.Event()
        self._watchers.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
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
