"""How this process carries out the effects a committed tenant transaction asked for
(db/platform/effects.py): each kind to the actor, publisher or announcer that does it.
Installed by `tocsin.boot.start_messaging`; a process that never installs them (the CLI's
migrate, a unit test) leaves the rows to the sweeper."""

from __future__ import annotations

from actors.chat import send_chats
from actors.email import send_deliveries
from actors.evidence import send_checkpoint_emails
from actors.prepare import send_claims
from actors.relay import wake
from actors.sms import send_sms
from actors.webhooks import send_webhooks
from db.platform.effects import (
    AnnounceInbox,
    PrepareClaims,
    PublishAlerts,
    SendChats,
    SendCheckpointEmails,
    SendEmails,
    SendSms,
    SendWebhooks,
    WakeRelay,
    handle,
)
from tocsin.core.settings import Settings
from tocsin.messaging.inbox_events import announce
from tocsin.monitoring.ops_alerts import publish_alerts

__all__ = ["install_effects"]


def install_effects(settings: Settings) -> None:
    handle(SendEmails, lambda slug, effect: send_deliveries(slug, effect.delivery_ids))
    handle(AnnounceInbox, lambda slug, effect: announce(slug, effect.user_ids))
    handle(PrepareClaims, lambda slug, effect: send_claims(slug, effect.claims))
    handle(PublishAlerts, lambda slug, effect: _discard(publish_alerts(slug)))
    handle(SendWebhooks, lambda slug, effect: send_webhooks(slug, effect.delivery_ids))
    handle(SendCheckpointEmails, lambda slug, effect: send_checkpoint_emails(slug, effect.checkpoint_ids))
    handle(SendChats, lambda slug, effect: send_chats(slug, effect.delivery_ids))
    handle(SendSms, lambda slug, effect: send_sms(slug, effect.delivery_ids))
    if settings.events_wakeup:
        handle(WakeRelay, lambda slug, effect: wake(slug))
    else:
        from db.platform.effects import stop_handling

        stop_handling(WakeRelay)


def _discard(count: int) -> None:
    """The publisher logs its count itself."""
