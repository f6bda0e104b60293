"""Outbound webhooks' decisions: the state machine of one webhook delivery, the retry
schedule, the circuit breaker and automatic disabling of an endpoint, the SSRF guard over
resolved addresses, and the payload a receiver gets.

A webhook delivery is one event for one endpoint. Its id is the `webhook-id` of every
attempt (Standard Webhooks), so a receiver drops a repeat: an attempt whose answer was lost
(a timeout after the request left, a worker killed mid-call) is sent again, never held.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from urllib.parse import urlsplit

from domain.delivery.states import ErrorClass
from domain.errors import InvalidInput
from domain.state_machine import StateMachine

__all__ = [
    "BREAKER_COOLDOWN",
    "BREAKER_FAILURES",
    "DISABLE_AFTER",
    "EVENT_KINDS",
    "MAX_ATTEMPTS",
    "MAX_RESPONSE_BYTES",
    "RETRY_FACTOR",
    "RETRY_MAX_STEPS",
    "ROTATION_OVERLAP",
    "TEST_EVENT",
    "WEBHOOK",
    "CallAnswer",
    "DestinationRefused",
    "EndpointHealth",
    "Verdict",
    "WebhookStatus",
    "after_failure",
    "check_destination",
    "classify_webhook_answer",
    "clip_response",
    "payload",
    "refusal_reason",
    "retry_delay",
    "valid_endpoint_url",
    "valid_event_kinds",
    "webhook_id",
]

MAX_ATTEMPTS = 12  # calls per delivery before it ends failed (about a day: see retry_delay)
RETRY_FACTOR = 3  # each wait's ceiling is this many times the previous one
RETRY_MAX_STEPS = 7  # the ceiling stops growing after this many steps (base 10 s: 6 h)
BREAKER_FAILURES = 5  # failed calls in a row to one endpoint that open its circuit
BREAKER_COOLDOWN = timedelta(minutes=5)  # no call to an open endpoint before this has passed
DISABLE_AFTER = timedelta(days=3)  # failing without a success this long disables the endpoint
ROTATION_OVERLAP = timedelta(hours=24)  # the previous secret still signs this long after a rotation
MAX_RESPONSE_BYTES = 1024  # of a receiver's answer, kept on the attempt
TEST_EVENT = "webhook.test"
EVENT_KINDS = ("notice.created", TEST_EVENT)  # what an endpoint may subscribe to


@dataclass(frozen=True)
class CallAnswer:
    """What one call came to: an HTTP status (with the first kilobyte of the body), or no
    answer (``error`` says why; ``sent`` whether the request may have reached the receiver)."""

    status_code: int | None
    latency_ms: int
    response: str | None = None
    error: str | None = None
    error_class: ErrorClass | None = None  # None: delivered
    sent: bool = True
    refused: bool = False  # the SSRF guard refused the address: no connection was made


class WebhookStatus(StrEnum):
    PENDING = "pending"  # due at send_after
    SENDING = "sending"  # claimed by one worker until lease_until
    DELIVERED = "delivered"  # the receiver answered 2xx
    FAILED = "failed"  # a permanent answer, or attempts exhausted: shown on the endpoint's log
    CANCELLED = "cancelled"  # the endpoint was disabled before it was sent (with why)


WEBHOOK = StateMachine.of("webhook", {
    WebhookStatus.PENDING: {WebhookStatus.SENDING, WebhookStatus.CANCELLED},
    # Back to pending: a retry, or a lease that ran out (the call's answer died with its worker).
    WebhookStatus.SENDING: {WebhookStatus.DELIVERED, WebhookStatus.PENDING, WebhookStatus.FAILED,
                            WebhookStatus.CANCELLED},
    # An administrator's "redeliver": sent once more with the same webhook-id.
    WebhookStatus.DELIVERED: {WebhookStatus.PENDING},
    WebhookStatus.FAILED: {WebhookStatus.PENDING},
    WebhookStatus.CANCELLED: {WebhookStatus.PENDING},
})


def webhook_id(tenant_slug: str, delivery_id: int) -> str:
    """The `webhook-id` of a delivery: the same for every attempt and every redelivery."""
    return f"tocsin_{tenant_slug}_{delivery_id}"


def retry_delay(attempt: int, jitter: float, base: timedelta) -> timedelta:
    """The wait after failed attempt ``attempt`` (1-based): the ceiling grows RETRY_FACTOR-fold
    per attempt up to RETRY_MAX_STEPS steps, and the wait is drawn from its upper half
    (``jitter`` in [0, 1), drawn by the caller) so endpoints that failed together do not
    retry together. With the default base of 10 s the ceilings are 10 s, 30 s, 90 s, 4.5 min,
    13.5 min, 40 min, 2 h, then 6 h: MAX_ATTEMPTS calls span about 14 to 27 hours."""
    if attempt < 1:
        raise ValueError("attempts count from 1")
    if not 0 <= jitter < 1:
        raise ValueError("jitter must be in [0, 1)")
    growth: int = RETRY_FACTOR ** min(attempt - 1, RETRY_MAX_STEPS)
    ceiling = base * growth
    return ceiling / 2 + (ceiling / 2) * jitter


def classify_webhook_answer(status_code: int) -> ErrorClass | None:
    """None when the receiver took it (2xx). A 410 is permanent (the receiver says the
    endpoint is gone: it is disabled). Everything else is retried, as the peers do: a
    receiver's 400 is as often a deploy gone wrong as a bad payload, and the schedule ends
    in a visible failure anyway. Redirects are never followed (one could point the call at an
    address the SSRF guard refuses) and count as failures."""
    if 200 <= status_code < 300:
        return None
    if status_code == 410:
        return ErrorClass.PERMANENT
    return ErrorClass.TRANSIENT


def clip_response(body: bytes) -> str:
    """The first MAX_RESPONSE_BYTES of an answer as text, cut on a character boundary."""
    text = body[:MAX_RESPONSE_BYTES].decode("utf-8", errors="replace")
    while len(text.encode("utf-8")) > MAX_RESPONSE_BYTES:
        text = text[:-1]
    return text


@dataclass(frozen=True)
class EndpointHealth:
    consecutive_failures: int
    failing_since: datetime | None


@dataclass(frozen=True)
class Verdict:
    """What one failed call changes on its endpoint."""

    consecutive_failures: int
    failing_since: datetime
    circuit_open_until: datetime | None  # calls to the endpoint wait until then
    disable_reason: str | None  # the endpoint is disabled, with this reason


def after_failure(health: EndpointHealth, now: datetime, *, gone: bool = False,
                  cooldown: timedelta = BREAKER_COOLDOWN) -> Verdict:
    """The endpoint's health after a failed call at ``now``: one more failure in a row; the
    circuit opens at BREAKER_FAILURES (and again at each failure after, a failed trial call);
    the endpoint is disabled on a 410 (``gone``) or when it has failed for DISABLE_AFTER with
    no success in between."""
    failures = health.consecutive_failures + 1
    since = health.failing_since or now
    reason = None
    if gone:
        reason = "the endpoint answered 410 Gone"
    elif now - since >= DISABLE_AFTER:
        reason = f"every call failed for {DISABLE_AFTER.days} days"
    return Verdict(failures, since, now + cooldown if failures >= BREAKER_FAILURES else None, reason)


# Addresses a webhook must never reach unless WEBHOOK_ALLOW_PRIVATE is set: the cloud
# metadata services (AWS, GCP, Azure on 169.254.169.254; AWS's IPv6 one) first, by name.
_METADATA = frozenset({ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")})
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: inside someone's network


class DestinationRefused(InvalidInput):
    """The SSRF guard refuses an endpoint's address (or its URL)."""


def refusal_reason(address: str) -> str | None:
    """Why the guard refuses one resolved address, or None when it may be called."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped or ip.sixtofour
        if mapped is not None:  # ::ffff:127.0.0.1 reaches 127.0.0.1
            inner = refusal_reason(str(mapped))
            if inner is not None:
                return inner
    if ip in _METADATA:
        return "a cloud metadata address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_private or (isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED):
        return "a private address"
    if ip.is_reserved or not ip.is_global:
        return "a reserved address"
    return None


def check_destination(host: str, addresses: Iterable[str], *, allow_private: bool) -> str:
    """The address to connect to for ``host``, given every address it resolved to: the
    first one, when the guard allows them all. Refused (DestinationRefused) when any is
    refused: a name that resolves to a public and a private address could be answered
    either way on the next lookup. The caller connects to the address returned, never
    resolves the name again (a second lookup could answer differently: DNS rebinding)."""
    resolved = list(dict.fromkeys(addresses))
    if not resolved:
        raise DestinationRefused(f"{host} resolves to no address")
    if not allow_private:
        for address in resolved:
            reason = refusal_reason(address)
            if reason is not None:
                raise DestinationRefused(
                    f"{host} resolves to {address}, {reason}: refused (set WEBHOOK_ALLOW_PRIVATE "
                    "to reach your own network)")
    return resolved[0]


def valid_endpoint_url(url: str, *, allow_private: bool) -> str:
    """An endpoint's URL, checked: https (http only where WEBHOOK_ALLOW_PRIVATE is set, for
    receivers on one's own network), a host, no credentials; at most 2000 characters."""
    url = url.strip()
    if not url or len(url) > 2000:
        raise InvalidInput("the URL must have 1 to 2000 characters")
    if any(ord(c) < 33 or c == "\x7f" for c in url):
        raise InvalidInput("the URL must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as e:  # an unclosed IPv6 bracket, and the like
        raise InvalidInput(f"the URL is not valid: {e}") from None
    allowed = ("https", "http") if allow_private else ("https",)
    if parts.scheme not in allowed:
        raise InvalidInput("the URL must start with https://" if not allow_private
                           else "the URL must start with https:// or http://")
    if not host:
        raise InvalidInput("the URL has no host")
    if parts.username or parts.password:
        raise InvalidInput("the URL must not carry credentials: the signature authenticates the call")
    try:
        parts.port  # noqa: B018 (raises on a port out of range)
    except ValueError as e:
        raise InvalidInput(f"the URL's port is not valid: {e}") from None
    if not allow_private:
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            check_destination(host, [str(literal)], allow_private=False)
    return url


def valid_event_kinds(kinds: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(k.strip() for k in kinds if k.strip()))
    if not chosen:
        raise InvalidInput("choose at least one event kind")
    unknown = [k for k in chosen if k not in EVENT_KINDS]
    if unknown:
        raise InvalidInput(f"unknown event kind {unknown[0]!r} (known: {', '.join(EVENT_KINDS)})")
    return chosen


def payload(kind: str, occurred_at: datetime, data: Mapping[str, object]) -> str:
    """The body of a webhook, per Standard Webhooks: type, timestamp, data; compact JSON
    with sorted keys, so every attempt sends the same bytes."""
    return json.dumps({"type": kind, "timestamp": occurred_at.isoformat(), "data": dict(data)},
                      separators=(",", ":"), sort_keys=True, default=str)
