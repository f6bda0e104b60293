"""Slack and Microsoft Teams: one chat message per (claim, recipient, channel), posted to an
incoming-webhook URL — the tenant's channel (one message per claim, no person behind it) or
a person's own (their preferences and quiet hours apply; a critical notice bypasses quiet
hours). What a message looks like (Block Kit for Slack, an Adaptive Card for Teams, each
with a link into the portal), the life of one delivery, its retries and the URL check are
decided here; db/delivery/chat_deliveries.py runs them.

Neither receiver deduplicates: an attempt whose answer was lost (a read timeout after the
request left, a worker killed mid-call) is sent again, and the channel may show it twice.
A repeat is judged better than a notice lost; the attempt is kept as `unknown`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

from domain.delivery.channels import CHANNELS, Channel
from domain.delivery.webhooks import valid_endpoint_url
from domain.errors import InvalidInput
from domain.messages import N_
from domain.state_machine import StateMachine

__all__ = [
    "CHAT",
    "CHAT_CHANNELS",
    "MAX_ATTEMPTS",
    "MAX_BODY_CHARS",
    "MAX_TITLE_CHARS",
    "ChatMessage",
    "ChatStatus",
    "channel_label",
    "message_body",
    "slack_blocks",
    "teams_card",
    "valid_chat_channel",
    "valid_chat_url",
]

CHAT_CHANNELS = (Channel.SLACK, Channel.TEAMS)
MAX_ATTEMPTS = 8  # calls per delivery before it ends failed (with webhooks' backoff: about 3 h)
MAX_TITLE_CHARS = 150  # Slack's limit for a header block's text
MAX_BODY_CHARS = 2_900  # under Slack's 3,000 for a section's text, with room for escaping

# The hosts that issue incoming-webhook URLs. A URL elsewhere is refused unless
# WEBHOOK_ALLOW_PRIVATE is set (tests, self-hosted relays): it guards against a pasted URL
# that was never a chat webhook, on top of the SSRF guard every call goes through.
_SLACK_HOSTS = ("hooks.slack.com",)
_TEAMS_SUFFIXES = (".webhook.office.com", ".logic.azure.com", ".api.powerplatform.com")


class ChatStatus(StrEnum):
    PENDING = "pending"  # due at send_after
    DEFERRED = "deferred"  # quiet hours: due at send_after, their end
    SENDING = "sending"  # claimed by one worker until lease_until
    DELIVERED = "delivered"  # the receiver answered 2xx
    FAILED = "failed"  # a permanent answer, or attempts exhausted (shown on the Channels page)
    CANCELLED = "cancelled"  # the recipient turned the channel off, or the channel was disabled


CHAT = StateMachine.of("chat", {
    ChatStatus.PENDING: {ChatStatus.SENDING, ChatStatus.CANCELLED},
    ChatStatus.DEFERRED: {ChatStatus.SENDING, ChatStatus.CANCELLED},
    # Back to pending: a retry, or a lease that ran out (the answer died with its worker).
    ChatStatus.SENDING: {ChatStatus.DELIVERED, ChatStatus.PENDING, ChatStatus.FAILED,
                         ChatStatus.CANCELLED},
    ChatStatus.DELIVERED: set(),
    ChatStatus.FAILED: set(),
    ChatStatus.CANCELLED: set(),
})


def valid_chat_channel(value: str) -> Channel:
    try:
        channel = Channel(value)
    except ValueError:
        channel = None
    if channel not in CHAT_CHANNELS:
        raise InvalidInput(N_("unknown chat channel “{value}” (known: slack, teams)"), value=value)
    assert channel is not None
    return channel


def channel_label(channel: Channel) -> str:
    return "Microsoft Teams" if channel is Channel.TEAMS else "Slack"


def valid_chat_url(channel: Channel, url: str, *, allow_private: bool) -> str:
    """An incoming-webhook URL, checked: https on the host that issues them (any http(s)
    host where WEBHOOK_ALLOW_PRIVATE is set), no credentials, at most 2000 characters."""
    checked = valid_endpoint_url(url, allow_private=allow_private)
    if allow_private:
        return checked
    host = (urlsplit(checked).hostname or "").lower()
    if channel is Channel.SLACK and host not in _SLACK_HOSTS:
        raise InvalidInput(N_("a Slack incoming-webhook URL starts with https://hooks.slack.com/"))
    if channel is Channel.TEAMS and not host.endswith(_TEAMS_SUFFIXES):
        raise InvalidInput(N_("a Teams incoming-webhook URL is on webhook.office.com or a Power "
                              "Automate (logic.azure.com) host"))
    return checked


@dataclass(frozen=True)
class ChatMessage:
    title: str
    body: str
    link: str  # absolute URL into the portal
    critical: bool = False


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _slack_escape(text: str) -> str:
    """Slack's mrkdwn reads &, < and > as markup (<url|label>, <!channel>): escape them, so
    a tenant's template can never mention @channel or disguise a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_blocks(message: ChatMessage) -> dict[str, object]:
    """A Block Kit message: a header, the body as a section, a button into the portal, and
    a plain `text` for notifications and clients that show no blocks."""
    title = _clip(message.title, MAX_TITLE_CHARS - (2 if message.critical else 0))
    if message.critical:
        title = "❗ " + title
    body = _slack_escape(_clip(message.body, MAX_BODY_CHARS)) or " "
    return {
        "text": _slack_escape(title),
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": title, "emoji": True}},
            {"type": "section", "text": {"type": "mrkdwn", "text": body}},
            {"type": "actions", "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": "Open in Tocsin"},
                 "url": message.link, "action_id": "open_in_tocsin"}]},
        ],
    }


def teams_card(message: ChatMessage) -> dict[str, object]:
    """An Adaptive Card (1.4) in the message envelope Teams' incoming webhooks take, with an
    OpenUrl action into the portal."""
    return {
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": None,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": [
                    {"type": "TextBlock", "text": _clip(message.title, MAX_TITLE_CHARS), "weight": "Bolder",
                     "size": "Medium", "wrap": True,
                     **({"color": "Attention"} if message.critical else {})},
                    {"type": "TextBlock", "text": _clip(message.body, MAX_BODY_CHARS), "wrap": True},
                ],
                "actions": [{"type": "Action.OpenUrl", "title": "Open in Tocsin", "url": message.link}],
            },
        }],
    }


def message_body(channel: Channel, message: ChatMessage) -> str:
    """The bytes posted to the channel's webhook: the same on every attempt."""
    if channel not in CHAT_CHANNELS or not CHANNELS[channel].has_provider_call:
        raise ValueError(f"{channel} is not a chat channel")
    shaped = slack_blocks(message) if channel is Channel.SLACK else teams_card(message)
    return json.dumps(shaped, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
