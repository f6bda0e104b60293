"""Notification preferences: categories, channels, frequencies, and whose choice wins.

Resolution order, strongest first: a *locked* tenant default (a compliance category an
admin made mandatory), the user's own choice, the tenant's unlocked default, the product
default. The frequency governs email only; the in-app row is the inbox and makes no sound.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from domain.errors import InvalidInput
from domain.messages import N_

__all__ = [
    "CATEGORIES",
    "CHAT_OPTED_OUT",
    "DIGEST_PERIOD",
    "MAX_LOCK_REASON",
    "OPTED_OUT",
    "PRODUCT_DEFAULT",
    "Channel",
    "Frequency",
    "Preference",
    "Resolved",
    "SendAction",
    "SendCheck",
    "Source",
    "TenantDefault",
    "chat_decision",
    "email_decision",
    "resolve",
    "resolve_channel_choice",
    "valid_category",
    "valid_frequency",
    "valid_lock_reason",
]

# The notifications.category CHECK list (tenant migrations 0001 and 0006), in display order.
CATEGORIES = (
    "document_review", "questionnaire_assigned", "response_revision", "policy_approved",
    "report_ready", "license_expiring", "member_invite", "vendor_questionnaire",
    "case_alert", "case_update", "obligation_due",
)


class Channel(StrEnum):
    IN_APP = "in_app"
    EMAIL = "email"


class Frequency(StrEnum):
    INSTANT = "instant"
    DAILY_DIGEST = "daily_digest"
    WEEKLY = "weekly"
    OFF = "off"


# The digest a batched frequency feeds, as named in notification_ledger.threshold.
DIGEST_PERIOD = {Frequency.DAILY_DIGEST: "daily", Frequency.WEEKLY: "weekly"}


class Source(StrEnum):
    LOCKED = "locked"  # the tenant's locked default
    USER = "user"
    TENANT = "tenant"
    PRODUCT = "product"


@dataclass(frozen=True)
class Preference:
    in_app: bool
    email: bool
    frequency: Frequency

    @property
    def emails(self) -> bool:
        return self.email and self.frequency is not Frequency.OFF


@dataclass(frozen=True)
class TenantDefault:
    preference: Preference
    locked: bool = False
    lock_reason: str | None = None
    critical: bool = False  # bypasses quiet hours


@dataclass(frozen=True)
class Resolved:
    preference: Preference
    source: Source
    locked: bool
    lock_reason: str | None
    critical: bool


PRODUCT_DEFAULT = Preference(in_app=True, email=True, frequency=Frequency.INSTANT)
MAX_LOCK_REASON = 300  # characters


def resolve(user: Preference | None, tenant: TenantDefault | None) -> Resolved:
    """The preference that applies to one (user, category)."""
    locked = tenant is not None and tenant.locked
    critical = tenant is not None and tenant.critical
    reason = tenant.lock_reason if tenant is not None and tenant.locked else None
    if tenant is not None and tenant.locked:
        return Resolved(tenant.preference, Source.LOCKED, locked, reason, critical)
    if user is not None:
        return Resolved(user, Source.USER, locked, reason, critical)
    if tenant is not None:
        return Resolved(tenant.preference, Source.TENANT, locked, reason, critical)
    return Resolved(PRODUCT_DEFAULT, Source.PRODUCT, locked, reason, critical)


class SendAction(StrEnum):
    SEND = "send"
    CANCEL = "cancel"
    DEFER = "defer"
    BATCH = "batch"


@dataclass(frozen=True)
class SendCheck:
    """What to do with one email right now: send it, cancel it (with the reason recorded),
    defer it to an instant (quiet hours), or batch it into a digest period."""

    action: SendAction
    reason: str | None = None
    until: datetime | None = None
    period: str | None = None  # 'daily' | 'weekly'

    @staticmethod
    def send() -> SendCheck:
        return SendCheck(SendAction.SEND)

    @staticmethod
    def cancel(reason: str) -> SendCheck:
        return SendCheck(SendAction.CANCEL, reason=reason)

    @staticmethod
    def defer(until: datetime) -> SendCheck:
        return SendCheck(SendAction.DEFER, until=until)

    @staticmethod
    def batch(period: str) -> SendCheck:
        return SendCheck(SendAction.BATCH, period=period)


OPTED_OUT = "recipient turned email off for this category"


def email_decision(resolved: Resolved, quiet_end: datetime | None) -> SendCheck:
    """The email decision given the resolved preference and, when the recipient is inside
    quiet hours now, the window's end (None: not quiet now)."""
    preference = resolved.preference
    if not preference.emails:
        return SendCheck.cancel(OPTED_OUT)
    if preference.frequency in DIGEST_PERIOD:
        return SendCheck.batch(DIGEST_PERIOD[preference.frequency])
    if quiet_end is not None and not resolved.critical:
        return SendCheck.defer(quiet_end)
    return SendCheck.send()


# Channels beyond email and the inbox (Slack, Teams) are chosen per (user, category) as
# on/off, resolved in the same order as the Preference: a locked tenant default, the user's
# choice, the tenant's default, the product default (on: the person gave the channel's URL
# to be told there). The SQL twin is db/delivery/chat_deliveries.py's _CHOICE.
CHAT_OPTED_OUT = "recipient turned this channel off for this category"


def resolve_channel_choice(user: bool | None, tenant: bool | None, *, locked: bool,
                           product_default: bool = True) -> bool:
    """Whether one (user, category) wants a chat channel."""
    if locked:
        return product_default if tenant is None else tenant
    if user is not None:
        return user
    if tenant is not None:
        return tenant
    return product_default


def chat_decision(wanted: bool, quiet_end: datetime | None, critical: bool) -> SendCheck:
    """A person's chat message, like an instant email: cancelled when they turned the
    channel off for the category, deferred to the end of their quiet hours unless the
    notice is critical, sent otherwise. (No digests: a chat message is one notice.)"""
    if not wanted:
        return SendCheck.cancel(CHAT_OPTED_OUT)
    if quiet_end is not None and not critical:
        return SendCheck.defer(quiet_end)
    return SendCheck.send()


def valid_category(value: str) -> str:
    if value not in CATEGORIES:
        raise InvalidInput(N_("unknown category “{value}”"), value=value)
    return value


def valid_frequency(value: str) -> Frequency:
    try:
        return Frequency(value)
    except ValueError:
        raise InvalidInput(N_("unknown frequency “{value}”"), value=value) from None


def valid_lock_reason(locked: bool, reason: str | None) -> str | None:
    """A lock must say why (members read it); an unlocked default keeps no reason."""
    if not locked:
        return None
    text = (reason or "").strip()
    if not text:
        raise InvalidInput(N_("say why the category is locked: members will read it"))
    if len(text) > MAX_LOCK_REASON:
        raise InvalidInput(N_("keep the reason under {count} characters"), count=MAX_LOCK_REASON)
    return text
