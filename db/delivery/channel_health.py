"""Each channel's health for a tenant's administrators: what it delivered and failed in the
last 24 hours and what waits, read in one statement per table (portal/routes/webhooks.py
shows it on the Channels page)."""

from __future__ import annotations

from dataclasses import dataclass

from db.platform.tenancy import TenantTx
from domain.delivery.channels import CHANNELS, Channel

__all__ = ["ChannelHealth", "channel_health", "sms_health"]


@dataclass(frozen=True)
class ChannelHealth:
    channel: Channel
    enabled: bool
    delivered_24h: int
    failed_24h: int
    waiting: int
    detail: str  # how it is enabled, in a sentence

    @property
    def receiver_dedupes(self) -> bool:
        return CHANNELS[self.channel].receiver_dedupes


_EMAIL = """
SELECT count(*) FILTER (WHERE status IN ('accepted', 'delivered')
                        AND updated_at > now() - interval '24 hours'),
       count(*) FILTER (WHERE status IN ('failed', 'bounced', 'complained')
                        AND updated_at > now() - interval '24 hours'),
       count(*) FILTER (WHERE status IN ('pending', 'deferred', 'sending', 'unknown'))
FROM notification_deliveries WHERE channel = 'email'
"""

_INBOX = """
SELECT count(*) FILTER (WHERE created_at > now() - interval '24 hours' AND archived_at IS NULL)
FROM notifications
"""

_WEBHOOK = """
SELECT (SELECT count(*) FROM webhook_endpoints WHERE enabled),
       (SELECT count(*) FROM webhook_endpoints),
       count(*) FILTER (WHERE status = 'delivered' AND delivered_at > now() - interval '24 hours'),
       count(*) FILTER (WHERE status = 'failed' AND updated_at > now() - interval '24 hours'),
       count(*) FILTER (WHERE status IN ('pending', 'sending'))
FROM webhook_deliveries
"""


_SMS = """
SELECT (SELECT count(*) FROM sms_numbers n JOIN sms_preferences p ON p.user_id = n.user_id AND p.sms),
       (SELECT count(*) FROM sms_numbers),
       count(*) FILTER (WHERE status = 'accepted' AND accepted_at > now() - interval '24 hours'),
       count(*) FILTER (WHERE status IN ('failed', 'unknown') AND updated_at > now() - interval '24 hours'),
       count(*) FILTER (WHERE status IN ('pending', 'deferred', 'sending'))
FROM sms_deliveries
"""


def sms_health(tx: TenantTx) -> ChannelHealth:
    """Texts: on once anyone has a number (a rule naming sms texts them; people also turn
    texts on per category)."""
    row = tx.conn.execute(_SMS).fetchone() or (0, 0, 0, 0, 0)
    people, numbers, sent, failed, waiting = (int(str(v)) for v in row)
    return ChannelHealth(Channel.SMS, numbers > 0, sent, failed, waiting,
                         f"{numbers} number{'' if numbers == 1 else 's'}, {people} choice"
                         f"{'' if people == 1 else 's'} of a category; rules naming sms text every "
                         "recipient with a number; capped per month.")


def channel_health(tx: TenantTx) -> list[ChannelHealth]:
    email = tx.conn.execute(_EMAIL).fetchone() or (0, 0, 0)
    inbox = tx.conn.execute(_INBOX).fetchone() or (0,)
    hooks = tx.conn.execute(_WEBHOOK).fetchone() or (0, 0, 0, 0, 0)
    n = [int(str(v)) for v in (*email, *inbox, *hooks)]
    return [
        ChannelHealth(Channel.EMAIL, True, n[0], n[1], n[2],
                      "Always on; each person's preferences, quiet hours and digests decide per category."),
        ChannelHealth(Channel.IN_APP, True, n[3], 0, 0,
                      "Always on; each person may hide a category from the inbox."),
        ChannelHealth(Channel.WEBHOOK, n[4] > 0, n[6], n[7], n[8],
                      f"{n[4]} of {n[5]} endpoint{'' if n[5] == 1 else 's'} enabled."),
        sms_health(tx),
    ]
