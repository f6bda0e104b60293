"""Slack and Teams for a tenant: the administrators' switch and channel URL per chat channel
(the Channels page), each person's own URL and on/off per category (the preference centre),
the tenant's default per category (the defaults page), and each channel's health. Every
change is audited; a URL is never written to the audit log (it is a credential), only
whether one is set.

Resolution of a person's choice is domain.delivery.preferences.resolve_channel_choice; its
SQL twin queues the messages (db/delivery/chat_deliveries.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx
from domain.delivery.channels import Channel
from domain.delivery.chat import CHAT, CHAT_CHANNELS, ChatStatus, valid_chat_channel, valid_chat_url
from domain.delivery.preferences import CATEGORIES, resolve_channel_choice, valid_category
from domain.errors import InvalidInput

__all__ = [
    "ChatChannelHealth",
    "ChatChoice",
    "chat_addresses",
    "chat_choices",
    "chat_defaults",
    "chat_health",
    "enabled_chat_channels",
    "save_chat_address",
    "save_chat_channel",
    "save_chat_choice",
    "save_chat_default",
]


def _masked(url: str | None) -> str | None:
    """A URL as shown back to people: the host and the last four characters (the rest is
    the webhook's secret)."""
    if not url:
        return None
    host = url.split("//", 1)[-1].split("/", 1)[0]
    return f"{host}/…{url[-4:]}"


# ---- the tenant's switch -----------------------------------------------------------------

def enabled_chat_channels(tx: TenantTx) -> list[Channel]:
    rows = tx.conn.execute("SELECT channel FROM chat_channels WHERE enabled").fetchall()
    on = {str(r[0]) for r in rows}
    return [c for c in CHAT_CHANNELS if str(c) in on]


_CANCEL_WAITING = f"""
UPDATE chat_deliveries SET status = 'cancelled', status_reason = %(reason)s, updated_at = now()
WHERE channel = %(channel)s AND status IN ('pending', 'deferred')
  AND {CHAT.where(to=ChatStatus.CANCELLED)}
"""


def save_chat_channel(tx: TenantTx, channel: str, *, enabled: bool, webhook_url: str,
                      keep_url: bool, allow_private: bool, by_user_id: int) -> None:
    """Turn a chat channel on or off for the tenant, with the URL of the tenant's own
    channel (empty: people's own URLs only; ``keep_url``: leave the stored one). Turning it
    off cancels what waits for it (with why)."""
    chat = valid_chat_channel(channel)
    url = webhook_url.strip()
    checked = valid_chat_url(chat, url, allow_private=allow_private) if url else None
    before = tx.conn.execute("SELECT enabled, webhook_url FROM chat_channels WHERE channel = %s FOR UPDATE",
                             [str(chat)]).fetchone()
    if keep_url and before is not None:
        checked = None if before[1] is None else str(before[1])
    tx.conn.execute(
        """INSERT INTO chat_channels (channel, enabled, webhook_url, updated_by) VALUES (%s, %s, %s, %s)
           ON CONFLICT (channel) DO UPDATE SET enabled = excluded.enabled,
               webhook_url = excluded.webhook_url, updated_by = excluded.updated_by, updated_at = now()""",
        [str(chat), enabled, checked, by_user_id])
    cancelled = 0
    if not enabled:
        cancelled = tx.conn.execute(_CANCEL_WAITING, {
            "channel": str(chat), "reason": "the channel was turned off by an administrator"}).rowcount
    record_audit(tx, "chat_channel.save", "chat_channel", str(chat),
                 before=None if before is None else {"enabled": bool(before[0]),
                                                     "channel_url_set": before[1] is not None},
                 after={"enabled": enabled, "channel_url_set": checked is not None,
                        "cancelled_waiting": cancelled})


# ---- a person's own URL and choices -------------------------------------------------------

def chat_addresses(tx: TenantTx, user_id: int) -> dict[Channel, str]:
    """A person's own URLs, masked for display."""
    rows = tx.conn.execute("SELECT channel, webhook_url FROM chat_addresses WHERE user_id = %s",
                           [user_id]).fetchall()
    return {Channel(str(r[0])): _masked(str(r[1])) or "" for r in rows}


def save_chat_address(tx: TenantTx, user_id: int, channel: str, webhook_url: str, *,
                      allow_private: bool) -> None:
    """Set (or, with an empty URL, remove) a person's own incoming-webhook URL."""
    chat = valid_chat_channel(channel)
    url = webhook_url.strip()
    if url:
        checked = valid_chat_url(chat, url, allow_private=allow_private)
        tx.conn.execute(
            """INSERT INTO chat_addresses (user_id, channel, webhook_url) VALUES (%s, %s, %s)
               ON CONFLICT (user_id, channel) DO UPDATE SET webhook_url = excluded.webhook_url,
                   updated_at = now()""", [user_id, str(chat), checked])
    else:
        tx.conn.execute("DELETE FROM chat_addresses WHERE user_id = %s AND channel = %s",
                        [user_id, str(chat)])
    record_audit(tx, "preference.chat_address", "user", user_id,
                 after={"channel": str(chat), "url_set": bool(url)})


@dataclass(frozen=True)
class ChatChoice:
    wanted: bool  # resolved: what applies
    locked: bool  # the tenant locked the category: the person cannot change it


def chat_choices(tx: TenantTx, user_id: int) -> dict[tuple[str, Channel], ChatChoice]:
    """Every (category, chat channel) choice of a person, resolved."""
    users = {(str(r[0]), str(r[1])): bool(r[2]) for r in tx.conn.execute(
        "SELECT category, channel, enabled FROM chat_preferences WHERE user_id = %s", [user_id])}
    tenant = {(str(r[0]), str(r[1])): bool(r[2]) for r in tx.conn.execute(
        "SELECT category, channel, enabled FROM chat_category_defaults")}
    locked = {str(r[0]) for r in tx.conn.execute("SELECT category FROM category_defaults WHERE locked")}
    return {(category, c): ChatChoice(resolve_channel_choice(users.get((category, str(c))),
                                                             tenant.get((category, str(c))),
                                                             locked=category in locked),
                                      category in locked)
            for category in CATEGORIES for c in CHAT_CHANNELS}


def save_chat_choice(tx: TenantTx, user_id: int, category: str, channel: str, wanted: bool) -> None:
    chat = valid_chat_channel(channel)
    valid_category(category)
    if tx.conn.execute("SELECT 1 FROM category_defaults WHERE category = %s AND locked",
                       [category]).fetchone() is not None:
        raise InvalidInput("your organisation decides this category's channels")
    tx.conn.execute(
        """INSERT INTO chat_preferences (user_id, category, channel, enabled) VALUES (%s, %s, %s, %s)
           ON CONFLICT (user_id, category, channel) DO UPDATE SET enabled = excluded.enabled,
               updated_at = now()""", [user_id, category, str(chat), wanted])
    record_audit(tx, "preference.chat", "user", user_id,
                 after={"category": category, "channel": str(chat), "enabled": wanted})


def chat_defaults(tx: TenantTx) -> dict[tuple[str, Channel], bool]:
    tenant = {(str(r[0]), str(r[1])): bool(r[2]) for r in tx.conn.execute(
        "SELECT category, channel, enabled FROM chat_category_defaults")}
    return {(category, c): tenant.get((category, str(c)), True) for category in CATEGORIES
            for c in CHAT_CHANNELS}


def save_chat_default(tx: TenantTx, category: str, channel: str, wanted: bool) -> None:
    chat = valid_chat_channel(channel)
    valid_category(category)
    tx.conn.execute(
        """INSERT INTO chat_category_defaults (category, channel, enabled) VALUES (%s, %s, %s)
           ON CONFLICT (category, channel) DO UPDATE SET enabled = excluded.enabled,
               updated_at = now()""", [category, str(chat), wanted])
    record_audit(tx, "settings.chat_default", "category", category,
                 after={"channel": str(chat), "enabled": wanted})


# ---- health -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChatChannelHealth:
    channel: Channel
    enabled: bool
    channel_url: str | None  # masked
    delivered_24h: int
    failed_24h: int  # deliveries that ended failed
    failed_attempts_24h: int  # attempts that did not deliver (retried or not)
    waiting: int
    last_success_at: datetime | None
    open_circuits: int  # URLs whose breaker is open now
    people: int  # people who gave a URL of their own


_HEALTH = """
SELECT c.channel,
       coalesce(s.enabled, false), s.webhook_url,
       (SELECT count(*) FROM chat_deliveries d WHERE d.channel = c.channel AND d.status = 'delivered'
          AND d.delivered_at > now() - interval '24 hours'),
       (SELECT count(*) FROM chat_deliveries d WHERE d.channel = c.channel AND d.status = 'failed'
          AND d.updated_at > now() - interval '24 hours'),
       (SELECT count(*) FROM chat_attempts a JOIN chat_deliveries d ON d.id = a.delivery_id
          WHERE d.channel = c.channel AND a.outcome IN ('retry', 'failed', 'unknown', 'refused')
            AND a.started_at > now() - interval '24 hours'),
       (SELECT count(*) FROM chat_deliveries d WHERE d.channel = c.channel
          AND d.status IN ('pending', 'deferred', 'sending')),
       (SELECT max(h.last_success_at) FROM chat_url_health h WHERE h.channel = c.channel),
       (SELECT count(*) FROM chat_url_health h WHERE h.channel = c.channel
          AND h.circuit_open_until > now()),
       (SELECT count(*) FROM chat_addresses a WHERE a.channel = c.channel)
FROM unnest(%s::text[]) AS c(channel)
LEFT JOIN chat_channels s ON s.channel = c.channel
"""


def chat_health(tx: TenantTx) -> list[ChatChannelHealth]:
    rows = tx.conn.execute(_HEALTH, [[str(c) for c in CHAT_CHANNELS]]).fetchall()
    return [ChatChannelHealth(
        Channel(str(r[0])), bool(r[1]), _masked(None if r[2] is None else str(r[2])),
        int(str(r[3])), int(str(r[4])), int(str(r[5])), int(str(r[6])),
        r[7] if isinstance(r[7], datetime) else None, int(str(r[8])), int(str(r[9])))
        for r in rows]
