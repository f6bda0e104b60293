"""Amazon SNS messages as they reach an HTTPS endpoint: what is signed, what must be
trusted, and the SES events they carry. Pure: fetching certificates and checking RSA
signatures happen in the portal (portal/sns.py).

Everything here is cheap and runs before any outbound request: a message from a topic we
did not subscribe to, with a certificate or subscription URL off Amazon's SNS hosts, too old,
oversized or missing a field is refused without fetching anything.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import parse_qs, urlsplit

from domain.errors import InvalidInput
from domain.people.identity import parse_instant, valid_slug

__all__ = [
    "DELIVERY_ID",
    "HASHES",
    "LOOPBACK_HOSTS",
    "MAX_AGE",
    "MAX_DETAIL_CHARS",
    "MAX_FIELD_CHARS",
    "MAX_MESSAGE_CHARS",
    "MAX_PROVIDER_ID_CHARS",
    "MAX_SIGNATURE_CHARS",
    "MAX_SKEW",
    "SEEN_RETENTION",
    "SIGNED_FIELDS",
    "SNS_HOST",
    "TOPIC_ARN",
    "Envelope",
    "SesEvent",
    "SnsTrust",
    "Untrusted",
    "check_envelope",
    "load_sns_json",
    "parse_ses_event",
    "string_to_sign",
    "valid_test_origin",
    "valid_topic_arn",
]

MAX_AGE = timedelta(hours=1)  # an older message is a replay, whatever its signature
MAX_SKEW = timedelta(minutes=5)  # a message from further in the future is refused too
# Seen message ids are kept this long; anything older is refused by its timestamp anyway.
SEEN_RETENTION = MAX_AGE + MAX_SKEW + timedelta(minutes=5)

MAX_MESSAGE_CHARS = 256 * 1024  # characters; SNS messages are at most 256 KB
MAX_FIELD_CHARS = 2048  # characters of any other envelope field (ids, ARNs, URLs, tokens)
MAX_SIGNATURE_CHARS = 1024  # base64 characters; a 4096-bit RSA signature is 684

# The fields signed for each message type, in the order SNS signs them.
SIGNED_FIELDS = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token",
                                 "TopicArn", "Type"),
    "UnsubscribeConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token",
                                "TopicArn", "Type"),
}
HASHES = {"1": "sha1", "2": "sha256"}  # SignatureVersion -> digest

TOPIC_ARN = re.compile(
    r"arn:aws(?:-cn|-us-gov|-iso[a-z-]*)?:sns:[a-z]{2}(?:-[a-z]+)+-\d{1,2}:\d{12}:[A-Za-z0-9_-]{1,256}"
    r"(?:\.fifo)?"
)
# Exactly Amazon's regional SNS hosts: a region-shaped label, nothing else. Other names
# under amazonaws.com (sns.s3.amazonaws.com is an S3 bucket) serve anyone's files.
SNS_HOST = re.compile(r"sns\.[a-z]{2}(?:-[a-z]+)+-\d{1,2}\.amazonaws\.com(?:\.cn)?")
MAX_PROVIDER_ID_CHARS = 256  # characters of an SES message id (they are about 60)
MAX_DETAIL_CHARS = 200  # characters of a bounce or complaint description kept
DELIVERY_ID = re.compile(r"[0-9]{1,18}")  # fits a bigint
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


class Untrusted(InvalidInput):
    """Unsigned, forged, replayed or from a host we do not trust: answered with 403."""


@dataclass(frozen=True)
class SnsTrust:
    """What the hook trusts: the topics it is subscribed to, and (tests only) a loopback
    origin serving a test certificate in place of Amazon's hosts."""

    allowed_topics: frozenset[str]
    test_origin: str | None = None  # e.g. http://127.0.0.1:8123; never reachable in production


@dataclass(frozen=True)
class Envelope:
    """A message that passed every check short of its signature."""

    kind: str  # Notification, SubscriptionConfirmation, UnsubscribeConfirmation
    message_id: str
    topic_arn: str
    digest: str  # sha1 or sha256
    signature: bytes
    certificate_url: str  # normalised: scheme, host and path, no query or fragment
    subscribe_url: str | None  # SubscriptionConfirmation: the URL that confirms it
    token: str | None


def valid_topic_arn(arn: str) -> str:
    if not TOPIC_ARN.fullmatch(arn):
        raise InvalidInput(
            f"invalid SNS topic ARN {arn[:100]!r}: use arn:aws:sns:<region>:<account>:<topic>"
        )
    return arn


def valid_test_origin(origin: str) -> str:
    """The tests' certificate origin must be plain http(s) on a loopback address: setting
    it cannot make a deployment trust a host on the network."""
    parts = urlsplit(origin)
    if (parts.scheme not in ("http", "https") or parts.path not in ("", "/") or parts.query
            or parts.username or parts.password or parts.netloc.rsplit(":", 1)[0] not in LOOPBACK_HOSTS):
        raise InvalidInput(
            f"SNS_TEST_CERT_ORIGIN must be a loopback origin such as http://127.0.0.1:8123, "
            f"got {origin[:100]!r}"
        )
    return origin.rstrip("/")


def load_sns_json(text: str | bytes) -> object:
    """JSON from SNS, or Untrusted: malformed and absurdly nested input alike."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise Untrusted("not an SNS message: malformed JSON") from None


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _trusted_url(url: str, trust: SnsTrust, what: str) -> str:
    """The URL if it is https on one of Amazon's SNS hosts (or the test origin); its
    scheme, host and path only."""
    if len(url) > MAX_FIELD_CHARS or any(c.isspace() or ord(c) < 0x20 or c == "\\" for c in url):
        raise Untrusted(f"{what} is not a trusted SNS address")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise Untrusted(f"{what} is not a trusted SNS address") from None
    amazon = (parts.scheme == "https" and port is None and parts.netloc == parts.hostname
              and SNS_HOST.fullmatch(parts.netloc) is not None)
    test = trust.test_origin is not None and _origin_of(url) == trust.test_origin
    if not (amazon or test) or parts.fragment:
        raise Untrusted(f"{what} is not a trusted SNS address")
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def _field(message: dict[str, object], name: str, limit: int = MAX_FIELD_CHARS) -> str:
    value = message.get(name)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise Untrusted(f"SNS message without a valid {name}")
    return value


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


def check_envelope(message: object, trust: SnsTrust, now: datetime) -> Envelope:
    """Everything that can be checked without the certificate, in order of cost: the shape
    and sizes, the topic, the age, the signature's encoding, the URLs' hosts."""
    if not isinstance(message, dict):
        raise Untrusted("not an SNS message")
    kind = message.get("Type")
    if not isinstance(kind, str) or kind not in SIGNED_FIELDS:
        raise Untrusted("not an SNS message: unknown Type")
    for name in SIGNED_FIELDS[kind]:
        if name in ("Message", "Subject"):
            value = message.get(name)
            if (value is not None or name == "Message") and not (
                    isinstance(value, str) and len(value) <= MAX_MESSAGE_CHARS):
                raise Untrusted(f"SNS message without a valid {name}")
        else:
            _field(message, name)
    topic = str(message["TopicArn"])
    if topic not in trust.allowed_topics:
        raise Untrusted(f"SNS topic {topic[:200]!r} is not in SNS_ALLOWED_TOPIC_ARNS")
    try:
        sent = parse_instant(str(message["Timestamp"]))
    except InvalidInput:
        raise Untrusted("SNS message without a valid timestamp") from None
    if not (now - MAX_AGE <= sent <= now + MAX_SKEW):
        raise Untrusted("SNS message too old or from the future: refused as a replay")
    digest = HASHES.get(str(message.get("SignatureVersion")))
    if digest is None:
        raise Untrusted("unsigned SNS message")
    try:
        signature = base64.b64decode(_field(message, "Signature", MAX_SIGNATURE_CHARS), validate=True)
    except (binascii.Error, ValueError):
        raise Untrusted("malformed SNS signature") from None
    certificate = message.get("SigningCertURL", message.get("SigningCertUrl"))
    if not isinstance(certificate, str):
        raise Untrusted("SNS message without a signing certificate")
    certificate_url = _trusted_url(certificate, trust, "SigningCertURL")
    if not certificate_url.endswith(".pem"):
        raise Untrusted("SigningCertURL does not name a .pem certificate")
    subscribe_url = None
    if kind != "Notification":
        subscribe_url = str(message["SubscribeURL"])
        _trusted_url(subscribe_url, trust, "SubscribeURL")
        query = parse_qs(urlsplit(subscribe_url).query)
        if query.get("Action") != ["ConfirmSubscription"] or query.get("TopicArn") != [topic]:
            raise Untrusted("SubscribeURL does not confirm this topic")
    token = str(message["Token"]) if kind != "Notification" else None
    return Envelope(kind, str(message["MessageId"]), topic, digest, signature, certificate_url,
                    subscribe_url, token)


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
    if not isinstance(kind, str) or kind not in _EVENT_TYPES or not isinstance(mail, dict):
        return None
    tags = mail.get("tags") or {}
    tenant, delivery = _tag(tags, "tenant"), _tag(tags, "delivery")
    # ASCII digits only: str.isdigit() accepts "²", which int() then refuses.
    if tenant is None or delivery is None or not DELIVERY_ID.fullmatch(delivery):
        return None
    try:
        valid_slug(tenant)
    except InvalidInput:
        return None
    message_id = mail.get("messageId")
    # SES's ids are printable ASCII; a control character (NUL above all, which PostgreSQL
    # cannot store) makes the record one we do not track, not a failed statement.
    if not isinstance(message_id, str) or not 0 < len(message_id) <= MAX_PROVIDER_ID_CHARS \
            or not message_id.isprintable():
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
                    bounce.get("bounceType") == "Permanent",
                    None if detail is None else detail.replace("\x00", "")[:MAX_DETAIL_CHARS])


def _tag(tags: object, name: str) -> str | None:
    if not isinstance(tags, dict):
        return None
    value = tags.get(name)
    if isinstance(value, list) and value and isinstance(value[0], str):
        return value[0]
    return None
