"""Amazon SNS messages as they reach an HTTPS endpoint: what is signed, what must be
trusted, and the SES events they carry. Pure: fetching certificates and checking RSA
signatures happen in the portal (portal/sns.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from domain.errors import InvalidInput
from domain.identity import parse_instant

MAX_AGE = timedelta(hours=1)  # an older message is a replay, whatever its signature
MAX_SKEW = timedelta(minutes=5)  # a message from further in the future is refused too

# The fields signed for each message type, in the order SNS signs them.
SIGNED_FIELDS = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token",
                                 "TopicArn", "Type"),
    "UnsubscribeConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token",
                                "TopicArn", "Type"),
}
HASHES = {"1": "sha1", "2": "sha256"}  # SignatureVersion -> digest


class Untrusted(InvalidInput):
    """Unsigned, forged, replayed or from a host we do not trust: answered with 403."""


def string_to_sign(message: dict[str, object]) -> bytes:
    kind = message.get("Type")
    if not isinstance(kind, str) or kind not in SIGNED_FIELDS:
        raise Untrusted(f"unknown SNS message type {kind!r}")
    parts = []
    for name in SIGNED_FIELDS[kind]:
        value = message.get(name)
        if value is None and name == "Subject":
            continue  # signed only when present
        if not isinstance(value, str):
            raise Untrusted(f"SNS message without {name}")
        parts.append(f"{name}\n{value}\n")
    return "".join(parts).encode()


def check_envelope(message: dict[str, object], trusted_url: str, now: datetime) -> str:
    """Check what can be checked without the certificate; return the digest to verify with."""
    digest = HASHES.get(str(message.get("SignatureVersion")))
    if digest is None or not isinstance(message.get("Signature"), str):
        raise Untrusted("unsigned SNS message")
    for name in ("SigningCertURL", "SigningCertUrl", "SubscribeURL"):
        url = message.get(name)
        if url is not None and not (isinstance(url, str) and re.match(trusted_url, url)):
            raise Untrusted(f"{name} is not a trusted SNS address")
    if not isinstance(message.get("SigningCertURL") or message.get("SigningCertUrl"), str):
        raise Untrusted("SNS message without a signing certificate")
    try:
        sent = parse_instant(str(message.get("Timestamp")))
    except InvalidInput:
        raise Untrusted("SNS message without a valid timestamp") from None
    if not (now - MAX_AGE <= sent <= now + MAX_SKEW):
        raise Untrusted("SNS message too old or from the future: refused as a replay")
    return digest


@dataclass(frozen=True)
class SesEvent:
    tenant: str
    delivery_id: int
    event_type: str  # send, delivery, bounce, complaint, reject, delivery_delay
    provider_message_id: str
    occurred_at: datetime
    permanent_bounce: bool
    detail: str | None


_EVENT_TYPES = {"Send": "send", "Delivery": "delivery", "Bounce": "bounce",
                "Complaint": "complaint", "Reject": "reject", "DeliveryDelay": "delivery_delay"}


def parse_ses_event(body: dict[str, object]) -> SesEvent | None:
    """An SES event-publishing record; None for events we do not track or that carry no
    Tocsin tags (mail sent by something else)."""
    kind = body.get("eventType") or body.get("notificationType")
    mail = body.get("mail")
    if kind not in _EVENT_TYPES or not isinstance(mail, dict):
        return None
    tags = mail.get("tags") or {}
    tenant, delivery = _tag(tags, "tenant"), _tag(tags, "delivery")
    if tenant is None or delivery is None or not delivery.isdigit():
        return None
    message_id = mail.get("messageId")
    if not isinstance(message_id, str):
        return None
    event_type = _EVENT_TYPES[str(kind)]
    bounce = body.get("bounce") if isinstance(body.get("bounce"), dict) else {}
    assert isinstance(bounce, dict)
    detail = None
    if event_type == "bounce":
        detail = f"{bounce.get('bounceType')}/{bounce.get('bounceSubType')}"
    elif event_type == "complaint":
        complaint = body.get("complaint")
        detail = str(complaint.get("complaintFeedbackType")) if isinstance(complaint, dict) else None
    try:
        occurred = parse_instant(str(mail.get("timestamp")))
    except InvalidInput:
        return None
    return SesEvent(tenant, int(delivery), event_type, message_id, occurred,
                    bounce.get("bounceType") == "Permanent", detail)


def _tag(tags: object, name: str) -> str | None:
    if not isinstance(tags, dict):
        return None
    value = tags.get(name)
    if isinstance(value, list) and value and isinstance(value[0], str):
        return value[0]
    return None
