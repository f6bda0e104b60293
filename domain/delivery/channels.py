"""Channels: what each way of reaching someone needs and promises.

Every channel keeps email's promise (one delivery per claim, recipient and channel; fenced
attempts; bounded retries that end in a visible state; uncertain outcomes handled; every
attempt kept). What differs between them is written here, once, as data: the kind of
address a delivery needs, the rate the receiving side allows, and how an answer is classed
(sent, retry later, fail now, or uncertain). Whether the receiver deduplicates decides what
an uncertain outcome costs: a webhook receiver drops a repeat by its webhook-id, so an
uncertain webhook is simply sent again; an email or a chat message may be seen twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from domain.delivery.states import ErrorClass

__all__ = [
    "CHANNELS",
    "DEDUPED_CALLS_PER_COMMIT",
    "AddressKind",
    "Channel",
    "ChannelSpec",
    "calls_per_commit",
    "classify_http_answer",
    "spec",
]

# Provider calls one commit may mark called at once, for a channel whose receiver drops a
# repeat: a crash then leaves up to this many calls per sending thread uncertain, each sent
# again under the same id and recognised. Where a repeat would reach a person twice, every
# call is marked in a commit of its own (at most one uncertain call per thread).
DEDUPED_CALLS_PER_COMMIT = 20


class Channel(StrEnum):
    EMAIL = "email"
    IN_APP = "in_app"
    WEBHOOK = "webhook"  # the tenant's own systems (an endpoint, not a person)
    SLACK = "slack"  # a Slack incoming-webhook URL (the tenant's channel, or a person's own)
    TEAMS = "teams"  # a Microsoft Teams incoming-webhook URL (likewise)
    SMS = "sms"  # a text to the person's mobile number, through AWS SNS


class AddressKind(StrEnum):
    EMAIL_ADDRESS = "email_address"  # the recipient's address, checked against suppressions
    INBOX = "inbox"  # the recipient's portal inbox: no address
    HTTPS_URL = "https_url"  # an endpoint URL, checked by the SSRF guard before each call
    CHAT_WEBHOOK_URL = "chat_webhook_url"  # an incoming-webhook URL, SSRF-guarded like HTTPS_URL
    PHONE_NUMBER = "phone_number"  # E.164, checked against the STOP list and SNS's opt-outs


@dataclass(frozen=True)
class ChannelSpec:
    channel: Channel
    address_kind: AddressKind
    # Calls per second the receiving side allows, per address (None: no limit of its own;
    # email shares SES_MAX_SEND_RATE across every worker instead).
    max_per_second: float | None
    receiver_dedupes: bool  # a repeat carrying the same id is dropped by the receiver
    has_provider_call: bool  # False: written in the same transaction as the notice (inbox)
    respects_quiet_hours: bool  # a person is reached: quiet hours defer it (critical bypasses)


CHANNELS: dict[Channel, ChannelSpec] = {
    Channel.EMAIL: ChannelSpec(Channel.EMAIL, AddressKind.EMAIL_ADDRESS, None,
                               receiver_dedupes=False, has_provider_call=True,
                               respects_quiet_hours=True),
    Channel.IN_APP: ChannelSpec(Channel.IN_APP, AddressKind.INBOX, None,
                                receiver_dedupes=True, has_provider_call=False,
                                respects_quiet_hours=False),
    Channel.WEBHOOK: ChannelSpec(Channel.WEBHOOK, AddressKind.HTTPS_URL, None,
                                 receiver_dedupes=True, has_provider_call=True,
                                 respects_quiet_hours=False),
    # Slack allows one message per second per incoming webhook (short bursts tolerated).
    Channel.SLACK: ChannelSpec(Channel.SLACK, AddressKind.CHAT_WEBHOOK_URL, 1.0,
                               receiver_dedupes=False, has_provider_call=True,
                               respects_quiet_hours=True),
    # Teams' connectors throttle at about four requests per second per webhook.
    Channel.TEAMS: ChannelSpec(Channel.TEAMS, AddressKind.CHAT_WEBHOOK_URL, 4.0,
                               receiver_dedupes=False, has_provider_call=True,
                               respects_quiet_hours=True),
    # SNS's default account limit is 20 texts per second; a repeat cannot be recognised.
    Channel.SMS: ChannelSpec(Channel.SMS, AddressKind.PHONE_NUMBER, 20.0,
                             receiver_dedupes=False, has_provider_call=True,
                             respects_quiet_hours=True),
}


def calls_per_commit(channel: ChannelSpec) -> int:
    """How many calls of this channel one commit marks called before they are made."""
    return DEDUPED_CALLS_PER_COMMIT if channel.receiver_dedupes and channel.has_provider_call else 1


def spec(channel: str) -> ChannelSpec:
    """The spec of a channel by name; ValueError for one Tocsin does not have."""
    return CHANNELS[Channel(channel)]


# Answers that say "not now" rather than "never": a timeout the receiver reports, a
# conflict it may resolve, too early, too many requests.
_RETRY_4XX = frozenset({408, 409, 425, 429})


def classify_http_answer(status_code: int) -> ErrorClass | None:
    """How an HTTP channel's answer is classed: None when it was taken (2xx); TRANSIENT for
    5xx, the 4xx that ask to come back later, and redirects (never followed: a redirect
    could point the call at an address the SSRF guard refuses); PERMANENT for other 4xx.
    A 410 (Gone) is permanent and also disables a webhook endpoint (domain/delivery/webhooks.py)."""
    if 200 <= status_code < 300:
        return None
    if 400 <= status_code < 500 and status_code not in _RETRY_4XX:
        return ErrorClass.PERMANENT
    return ErrorClass.TRANSIENT
