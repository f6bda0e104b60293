"""Delivery decisions: how provider errors are classed and when a retry is due."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

MAX_ATTEMPTS = 8  # attempts per delivery before it ends failed (about 3-6 hours of retries)
BASE_DELAY = timedelta(minutes=5)  # ceiling of the first retry delay; doubles each attempt
MAX_DELAY = timedelta(hours=2)  # no single wait is longer than this


class ErrorClass(StrEnum):
    TRANSIENT = "transient"  # throttling, 5xx, timeouts: retry later
    PERMANENT = "permanent"  # rejected message, invalid address: fail now


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


def classify_provider_error(code: str | None, http_status: int | None) -> ErrorClass:
    if code in PERMANENT_CODES:
        return ErrorClass.PERMANENT
    if http_status is not None and 400 <= http_status < 500 and http_status not in (408, 429):
        return ErrorClass.PERMANENT
    return ErrorClass.TRANSIENT


def retry_delay(attempt: int, jitter: float) -> timedelta:
    """Delay before the attempt after ``attempt`` (1-based): exponential with full jitter
    over its upper half, so a burst of failures does not retry in lockstep.
    ``jitter`` is a number in [0, 1) the caller draws."""
    if not 0 <= jitter < 1:
        raise ValueError("jitter must be in [0, 1)")
    ceiling = min(BASE_DELAY * (1 << (attempt - 1)), MAX_DELAY)
    return ceiling / 2 + (ceiling / 2) * jitter


def should_retry(error_class: ErrorClass, attempts: int) -> bool:
    return error_class is ErrorClass.TRANSIENT and attempts < MAX_ATTEMPTS


def email_message_id(tenant_slug: str, delivery_id: int, sender_domain: str) -> str:
    """The RFC 5322 Message-ID of a delivery: the same for every attempt, so a resend is
    recognisably the same message to the provider, to mail clients and to us."""
    return f"<delivery-{delivery_id}.{tenant_slug}@{sender_domain}>"


def email_text(body: str, link: str | None) -> str:
    text = body.rstrip() + "\n"
    if link:
        text += f"\nOpen it in your portal: {link}\n"
    return text + "\nYou receive this because your organisation uses Tocsin for compliance reminders.\n"
