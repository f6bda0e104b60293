"""SMS: what a text costs, what it says, and whether it may go now.

A text is opt-in per category (each one costs money), goes only to a number that is not on
the tenant's STOP list nor opted out at the provider, waits for the end of quiet hours like
an email (a critical notice does not), and is refused once the tenant's monthly spend would
pass its cap. The price is counted in segments: 160 characters of the GSM 7-bit alphabet,
or 70 of anything else; a longer text is split into parts of 153 or 67, each billed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from domain.delivery.preferences import SendCheck
from domain.delivery.states import ErrorClass
from domain.errors import InvalidInput
from domain.messages import N_

__all__ = [
    "CAP_ABOVE_CEILING",
    "CAP_MALFORMED",
    "CAP_NEGATIVE",
    "MAX_SEGMENTS",
    "OPTED_OUT_AT_PROVIDER",
    "SMS_OFF",
    "SmsRecipient",
    "classify_sns_error",
    "cost_of",
    "effective_cap",
    "segments",
    "sms_decision",
    "sms_text",
    "spend_refusal",
    "tenant_cap",
]

# The GSM 03.38 default alphabet; the extension characters count twice (escape + char).
_GSM = set("@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
           "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà")
_GSM_EXTENDED = set("^{}\\[~]|€")
MAX_SEGMENTS = 3  # a notice's text is cut to fit this many segments

SMS_OFF = "recipient has not turned SMS on for this category"
OPTED_OUT_AT_PROVIDER = "the number opted out of texts (reported by the provider)"


def _gsm_length(text: str) -> int | None:
    """Septets the text takes in the GSM alphabet, or None when it needs UCS-2."""
    length = 0
    for ch in text:
        if ch in _GSM:
            length += 1
        elif ch in _GSM_EXTENDED:
            length += 2
        else:
            return None
    return length


def segments(text: str) -> int:
    gsm = _gsm_length(text)
    if gsm is not None:
        return 1 if gsm <= 160 else -(-gsm // 153)
    units = len(text.encode("utf-16-le")) // 2
    return 1 if units <= 70 else -(-units // 67)


def sms_text(title: str, link: str | None, sender: str = "Tocsin") -> str:
    """The text of a notice: who sends it, its title and the link into the portal, cut to
    MAX_SEGMENTS (the title loses its end, never the link)."""
    tail = f" {link}" if link else ""
    head = f"{sender}: "
    title = " ".join(title.split())
    while title and segments(head + title + tail) > MAX_SEGMENTS:
        title = title[:-1]
    return head + title.rstrip() + tail


def cost_of(text: str, price_per_segment: Decimal) -> Decimal:
    return (price_per_segment * segments(text)).quantize(Decimal("0.00001"), ROUND_HALF_UP)


def spend_refusal(spent: Decimal, cost: Decimal, cap: Decimal, month: str) -> str | None:
    """Why this text may not go (the tenant's month would pass its cap), or None."""
    if spent + cost <= cap:
        return None
    return (f"monthly SMS spend cap reached: {spent:.2f} of {cap:.2f} spent in {month}, "
            f"and this text costs {cost:.4f}")


CAP_MALFORMED = N_("The cap must be an amount such as 25 or 12.50.")
CAP_NEGATIVE = N_("The cap cannot be negative.")
CAP_ABOVE_CEILING = N_("The cap cannot be above the most this installation allows (shown under the field).")


def tenant_cap(typed: str, ceiling: Decimal) -> Decimal:
    """The monthly cap a tenant's administrator typed, checked against the operator's
    ceiling (SMS_MONTHLY_SPEND_CAP); InvalidInput says what is wrong (a message id the
    portal translates)."""
    try:
        cap = Decimal(typed.strip())
    except ArithmeticError:
        raise InvalidInput(CAP_MALFORMED) from None
    if not cap.is_finite():
        raise InvalidInput(CAP_MALFORMED)
    if cap < 0:
        raise InvalidInput(CAP_NEGATIVE)
    if cap > ceiling:
        raise InvalidInput(CAP_ABOVE_CEILING)
    return cap.quantize(Decimal("0.01"), ROUND_HALF_UP)


def effective_cap(tenant: Decimal | None, ceiling: Decimal) -> Decimal:
    """The cap a text is checked against: the tenant's own, never above the operator's."""
    return ceiling if tenant is None else min(tenant, ceiling)


@dataclass(frozen=True)
class SmsRecipient:
    """What the claim knows about one text's recipient right before it is sent."""

    phone: str | None  # E.164, or None when the person gave no number
    sms_on: bool  # the person turned texts on for the notice's category
    stopped: bool  # the number is on the tenant's STOP list
    critical: bool  # the notice or its category is critical: quiet hours do not hold it


def sms_decision(recipient: SmsRecipient, quiet_end: datetime | None) -> SendCheck:
    """Send, cancel (with the reason recorded) or defer to the end of quiet hours."""
    if recipient.phone is None:
        return SendCheck.cancel("recipient has no mobile number")
    if not recipient.sms_on:
        return SendCheck.cancel(SMS_OFF)
    if recipient.stopped:
        return SendCheck.cancel("the number asked to STOP texts")
    if quiet_end is not None and not recipient.critical:
        return SendCheck.defer(quiet_end)
    return SendCheck.send()


# SNS answers that will fail the same way however often they are retried.
_PERMANENT_SNS = frozenset({"InvalidParameter", "InvalidParameterValue", "AuthorizationError",
                            "OptedOut", "EndpointDisabled", "KMSDisabled", "KMSNotFound"})


def classify_sns_error(code: str | None, http_status: int | None) -> ErrorClass:
    if code in ("Throttled", "ThrottlingException", "Throttling"):
        return ErrorClass.TRANSIENT
    if code in _PERMANENT_SNS:
        return ErrorClass.PERMANENT
    if http_status is not None and 400 <= http_status < 500 and http_status not in (408, 429):
        return ErrorClass.PERMANENT
    return ErrorClass.TRANSIENT
