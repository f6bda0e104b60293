"""Live push for open inbox pages: after a transaction that gave people new notifications
commits, one small Redis pub/sub message per tenant names them; the portal's event stream
(portal/live.py) tells each named reader's open page to fetch what is new.

The message carries user ids only, never a notification: what a page shows is always read
from Postgres by the reader's own request. Pub/sub is fire-and-forget, so a lost message
(Redis down, no subscriber yet) costs liveness only: the inbox's poll still shows the notice.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import redis

from tocsin.core.settings import Settings

__all__ = [
    "PUBLISH_TIMEOUT",
    "InboxAnnouncer",
    "announce",
    "channel",
    "channel_pattern",
    "configure_announcer",
    "decode",
    "encode",
]

log = logging.getLogger("tocsin.messaging.inbox_events")

PUBLISH_TIMEOUT = 2.0  # seconds a publish may take before the push is given up (the poll remains)


def channel(namespace: str, tenant: str) -> str:
    return f"{namespace}:inbox:{tenant}"


def channel_pattern(namespace: str) -> str:
    """Every tenant's channel: one subscription per web process serves all its streams."""
    return f"{namespace}:inbox:*"


def encode(user_ids: Iterable[int]) -> str:
    return json.dumps({"users": sorted(set(user_ids))})


def decode(namespace: str, channel_name: str, data: str) -> tuple[str, frozenset[int]] | None:
    """(tenant, user ids) of a message, or None for anything that is not one of ours."""
    prefix = f"{namespace}:inbox:"
    if not channel_name.startswith(prefix):
        return None
    try:
        users = json.loads(data)["users"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(users, list) or not all(isinstance(u, int) for u in users):
        return None
    return channel_name[len(prefix):], frozenset(users)


@dataclass(frozen=True)
class InboxAnnouncer:
    client: redis.Redis
    namespace: str

    def announce(self, tenant: str, user_ids: Iterable[int]) -> None:
        ids = set(user_ids)
        if not ids:
            return
        try:
            self.client.publish(channel(self.namespace, tenant), encode(ids))
        except redis.RedisError as error:
            # Not raised: the notifications are committed and the poll will show them.
            log.warning("live inbox push lost tenant=%s users=%d: %s", tenant, len(ids), error)


_announcer: InboxAnnouncer | None = None


def configure_announcer(settings: Settings) -> None:
    """Built at process start from the settings (never at import time); connects on use."""
    global _announcer
    client = redis.Redis.from_url(
        settings.redis_url, socket_timeout=PUBLISH_TIMEOUT, socket_connect_timeout=PUBLISH_TIMEOUT
    )
    _announcer = InboxAnnouncer(client, settings.dramatiq_namespace)


def announce(slug: str, user_ids: set[int]) -> None:
    """Name the users a committed transaction gave new notifications (the AnnounceInbox
    effect, wired by tocsin/boot/effects.py). Without a configured announcer the poll alone
    shows them."""
    if user_ids and _announcer is not None:
        _announcer.announce(slug, user_ids)
