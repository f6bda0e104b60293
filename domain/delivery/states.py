"""Delivery decisions: the state machine of one delivery, how provider errors are classed,
and when a retry is due.

A delivery is one message to one recipient on one channel. Its status moves only along
the transitions below (DELIVERY): every UPDATE of the status in db/ takes its guard from
DELIVERY.where, and PostgreSQL refuses any other move.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

from domain.state_machine import StateMachine

__all__ = [
    "BASE_DELAY",
    "DELIVERY",
    "MAX_ATTEMPTS",
    "MAX_DELAY",
    "NOT_SENT",
    "PERMANENT_CODES",
    "PROVIDER_EVENT_TARGETS",
    "PROVIDER_MAY_HOLD",
    "TERMINAL",
    "THROTTLING_CODES",
    "TRANSITIONS",
    "WAITING",
    "ErrorClass",
    "Status",
    "UnknownPolicy",
    "classify_provider_error",
    "email_message_id",
    "email_text",
    "provider_event_move",
    "retry_delay",
    "should_retry",
]

MAX_ATTEMPTS = 8  # provider calls per delivery before it ends failed
BASE_DELAY = timedelta(minutes=6)  # ceiling of the first retry delay; doubles each attempt
MAX_DELAY = timedelta(hours=2)  # no single wait is longer than this


class Status(StrEnum):
    PENDING = "pending"  # due at send_after; waiting for a worker
    DEFERRED = "deferred"  # held until send_after (quiet hours); never dropped
    BATCHED = "batched"  # waiting for the recipient's digest
    SENDING = "sending"  # claimed by one worker until lease_until
    ACCEPTED = "accepted"  # the provider took it
    DELIVERED = "delivered"  # the provider reports the recipient's server took it
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    FAILED = "failed"  # permanent error or attempts exhausted: needs a person
    UNKNOWN = "unknown"  # the provider may or may not have it: reconciliation decides
    CANCELLED = "cancelled"  # no longer wanted, with a stated reason


TERMINAL = frozenset({Status.BOUNCED, Status.COMPLAINED, Status.FAILED, Status.CANCELLED})

# Every allowed move. Provider events (delivered, bounced, complained) may arrive for a
# message we have not yet recorded as accepted, so they may follow sending and unknown too.
TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.PENDING: frozenset({Status.SENDING, Status.DEFERRED, Status.BATCHED, Status.CANCELLED}),
    # Deferred again: quiet hours still hold it when it falls due (the recipient moved them).
    Status.DEFERRED: frozenset({
        Status.SENDING, Status.PENDING, Status.DEFERRED, Status.BATCHED, Status.CANCELLED,
    }),
    Status.BATCHED: frozenset({Status.DELIVERED, Status.CANCELLED}),
    Status.SENDING: frozenset({
        Status.ACCEPTED, Status.PENDING, Status.DEFERRED, Status.BATCHED, Status.FAILED,
        Status.UNKNOWN, Status.CANCELLED, Status.DELIVERED, Status.BOUNCED, Status.COMPLAINED,
    }),
    # SES may reject a message after accepting the request (a virus found): it will not be
    # delivered, and a person must see it.
    Status.ACCEPTED: frozenset({Status.DELIVERED, Status.BOUNCED, Status.COMPLAINED, Status.FAILED}),
    Status.DELIVERED: frozenset({Status.BOUNCED, Status.COMPLAINED}),  # late bounce, complaint
    Status.UNKNOWN: frozenset({
        Status.ACCEPTED, Status.PENDING, Status.DELIVERED, Status.BOUNCED, Status.COMPLAINED,
        Status.CANCELLED, Status.FAILED,
    }),
    Status.BOUNCED: frozenset(),
    Status.COMPLAINED: frozenset(),
    Status.FAILED: frozenset({Status.PENDING}),  # an operator's explicit retry
    Status.CANCELLED: frozenset(),
}

DELIVERY = StateMachine.of("delivery", TRANSITIONS)


# Due and waiting for a worker: the only statuses a worker claims, and the only ones a
# delivery can be cancelled, deferred or batched from without a claim of its own.
WAITING = frozenset({Status.PENDING, Status.DEFERRED})

# Nothing sent yet, nor claimed: what a deactivation, a renewal or a moved due date cancels.
NOT_SENT = WAITING | {Status.BATCHED}

# Statuses in which the provider may hold our message, so a provider event may move them.
PROVIDER_MAY_HOLD = frozenset({Status.SENDING, Status.UNKNOWN, Status.ACCEPTED, Status.DELIVERED})

# What each provider event (SES through SNS) moves a delivery to.
PROVIDER_EVENT_TARGETS: dict[str, Status] = {
    "send": Status.ACCEPTED,
    "delivery": Status.DELIVERED,
    "bounce": Status.BOUNCED,
    "complaint": Status.COMPLAINED,
    "reject": Status.FAILED,
}


def provider_event_move(event_type: str) -> tuple[Status, frozenset[Status]] | None:
    """(target, statuses it may move from) for a provider event, or None when the event
    moves nothing (a delivery delay, an event type we do not know)."""
    target = PROVIDER_EVENT_TARGETS.get(event_type)
    if target is None:
        return None
    return target, frozenset(Status(s) for s in DELIVERY.sources(target) & PROVIDER_MAY_HOLD)


class ErrorClass(StrEnum):
    TRANSIENT = "transient"  # throttling, 5xx, refused connections: not sent, retry later
    PERMANENT = "permanent"  # rejected message, invalid address: fail now
    UNCERTAIN = "uncertain"  # the request left and no answer came back: may have been sent


# Provider error codes that will fail the same way however often they are retried.
PERMANENT_CODES = frozenset({
    "MessageRejected",
    "InvalidParameterValue",
    "MailFromDomainNotVerifiedException",
    "AccountSuspendedException",
    "SendingPausedException",
    "BadRequestException",
    "NotFoundException",
})
# Codes that say "slow down": retried whatever HTTP status carries them (SES v1 answers
# throttling with a 400).
THROTTLING_CODES = frozenset({
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "LimitExceededException",
    "MaxSendingRateExceeded",
})


def classify_provider_error(code: str | None, http_status: int | None) -> ErrorClass:
    if code in THROTTLING_CODES:
        return ErrorClass.TRANSIENT
    if code in PERMANENT_CODES:
        return ErrorClass.PERMANENT
    if http_status is not None and 400 <= http_status < 500 and http_status not in (408, 429):
        return ErrorClass.PERMANENT
    return ErrorClass.TRANSIENT


def retry_delay(attempt: int, jitter: float) -> timedelta:
    """Delay before the attempt after ``attempt`` (1-based): exponential, with jitter over
    the upper half of each step so a burst of failures does not retry in lockstep.
    ``jitter`` is a number in [0, 1) the caller draws."""
    if attempt < 1:
        raise ValueError("attempts count from 1")
    if not 0 <= jitter < 1:
        raise ValueError("jitter must be in [0, 1)")
    ceiling = min(BASE_DELAY * (1 << min(attempt - 1, 20)), MAX_DELAY)
    return ceiling / 2 + (ceiling / 2) * jitter


def should_retry(error_class: ErrorClass, attempts: int) -> bool:
    return error_class is ErrorClass.TRANSIENT and attempts < MAX_ATTEMPTS


class UnknownPolicy(StrEnum):
    """What reconciliation does with an unknown outcome when no provider event arrived."""

    RESEND = "resend"  # send again with the same Message-ID
    HOLD = "hold"  # keep it unknown and list it for a person to decide


def email_message_id(tenant_slug: str, delivery_id: int, sender_domain: str) -> str:
    """The RFC 5322 Message-ID of a delivery: the same for every attempt, so a resend is
    recognisably the same message to the provider, to mail clients and to us."""
    return f"<delivery-{delivery_id}.{tenant_slug}@{sender_domain}>"


def email_text(body: str, link: str | None, unsubscribe_link: str | None = None) -> str:
    text = body.rstrip() + "\n"
    if link:
        text += f"\nOpen it in your portal: {link}\n"
    text += "\nYou receive this because your organisation uses Tocsin for compliance reminders.\n"
    if unsubscribe_link:
        text += f"Stop these emails: {unsubscribe_link}\n"
    return text
