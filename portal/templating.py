"""The Jinja2 environment: autoescaping on, strict about undefined names, and the filters
that turn stored values into words a person reads."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from domain.people.identity import Role
from portal.links import local_path
from tocsin.core.clock import utcnow

__all__ = [
    "CATEGORY_LABELS",
    "CLAIM_LABELS",
    "DELIVERY_LABELS",
    "OUTCOME_LABELS",
    "PLAN_LABELS",
    "ROLE_LABELS",
    "RULE_LABELS",
    "STATUS_LABELS",
    "STEP_LABELS",
    "TEMPLATES",
    "THRESHOLD_LABELS",
    "ago",
    "build_environment",
    "link_label",
    "local_datetime",
    "local_href",
    "long_date",
    "offset_label",
    "short_date",
    "threshold_label",
]

TEMPLATES = Path(__file__).resolve().parent / "templates"

ROLE_LABELS = {
    Role.ADMIN: "Administrator",
    Role.MEMBER: "Team member",
    Role.CLIENT_USER: "Client user",
}
CATEGORY_LABELS = {
    "document_review": "Document review",
    "questionnaire_assigned": "Questionnaire",
    "response_revision": "Response revision",
    "policy_approved": "Policy approved",
    "report_ready": "Report ready",
    "license_expiring": "Licence",
    "member_invite": "Invitation",
    "vendor_questionnaire": "Vendor questionnaire",
    "case_alert": "Case alert",
    "case_update": "Case update",
    "obligation_due": "Obligation due",
}
PLAN_LABELS = {"standard": "Standard", "enterprise": "Enterprise"}
STATUS_LABELS = {"active": "Active", "expired": "Access paused", "closed": "Closed"}
RULE_LABELS = {"licence": "Annual licence"}
THRESHOLD_LABELS = {
    "expiry": "Expiry day", "closed": "Account closed", "renewed": "Renewal confirmed",
    "grace1": "1 day after expiry", "grace3": "3 days after expiry", "grace7": "7 days after expiry",
}
CLAIM_LABELS = {"claimed": "Claimed", "skipped": "Skipped", "cancelled": "Cancelled"}
DELIVERY_LABELS = {
    "pending": "Waiting to send", "deferred": "Held for quiet hours", "batched": "In a digest",
    "sending": "Sending", "accepted": "Accepted by the mail service", "delivered": "Delivered",
    "bounced": "Bounced", "complained": "Marked as spam", "failed": "Failed",
    "unknown": "Outcome unknown", "cancelled": "Cancelled",
}
OUTCOME_LABELS = {
    "accepted": "Accepted", "retry": "Failed, retried", "failed": "Failed",
    "unknown": "Outcome unknown", "cancelled": "Cancelled", None: "In progress",
}


STEP_LABELS = {
    "claimed": "Notice claimed", "skipped": "Skipped", "cancelled": "Cancelled",
    "due": "Due now", "scheduled": "Scheduled", "passed": "Window passed",
}


def offset_label(offset: int, business_days: bool = False) -> str:
    """'30 days before', 'On the due date', '7 working days after'."""
    if offset == 0:
        return "On the due date"
    unit = "working day" if business_days else "day"
    days = abs(offset)
    return f"{days} {unit}{'s' if days != 1 else ''} {'before' if offset < 0 else 'after'}"


def threshold_label(threshold: str) -> str:
    """'30 days before', 'Expiry day', ...: never the internal code."""
    if threshold in THRESHOLD_LABELS:
        return THRESHOLD_LABELS[threshold]
    if threshold.startswith("offset:") and threshold[7:].lstrip("+-").isdigit():
        return offset_label(int(threshold[7:]))
    if threshold.startswith("tat:"):
        return "Turnaround breached"
    if threshold[:1] == "d" and threshold[1:].isdigit():
        days = int(threshold[1:])
        return f"{days} day{'s' if days != 1 else ''} before expiry"
    return threshold


def ago(moment: datetime, now: datetime | None = None) -> str:
    """'just now', '5 minutes ago', 'yesterday', '3 weeks ago' ..."""
    seconds = int(((now or utcnow()) - moment).total_seconds())
    if seconds < 60:
        return "just now"
    for unit, size in (("minute", 60), ("hour", 3600), ("day", 86400)):
        count = seconds // size
        limit = {"minute": 60, "hour": 24, "day": 7}[unit]
        if count < limit:
            if unit == "day" and count == 1:
                return "yesterday"
            return f"{count} {unit}{'s' if count != 1 else ''} ago"
    weeks = seconds // (7 * 86400)
    if weeks < 5:
        return f"{weeks} week{'s' if weeks != 1 else ''} ago"
    months = seconds // (30 * 86400)
    if months < 12:
        return f"{months} month{'s' if months != 1 else ''} ago"
    return "over a year ago"


def local_datetime(moment: datetime, zone: str) -> str:
    """'3 Mar 2026, 09:15' in the reader's zone."""
    local = moment.astimezone(ZoneInfo(zone))
    return f"{local.day} {local:%b %Y, %H:%M}"


def short_date(day: date) -> str:
    """'5 Dec 2026'."""
    return f"{day.day} {day:%b %Y}"


def long_date(day: date) -> str:
    """'31 March 2027'."""
    return f"{day.day} {day:%B %Y}"


def local_href(data: dict[str, Any]) -> str | None:
    """The notification's deep link if it points into this portal; anything else is dropped."""
    return local_path(data.get("href"))


def link_label(href: str) -> str:
    if href == "/licence" or href.startswith("/clients/"):
        return "View licence details"
    return "Open"


def english_words(message: str, /, **values: Any) -> str:
    """``_()`` of the pages written for the catalogs (the email template editor), in English
    until the catalog-backed one of the portal's localisation replaces it: the message with
    its {names} filled in, as plain text (autoescaping escapes it, values included, once)."""
    return message.format(**values) if values else message


def build_environment(globals_: dict[str, Any]) -> Environment:
    environment = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(
        ago=ago,
        local_datetime=local_datetime,
        long_date=long_date,
        short_date=short_date,
        offset_label=offset_label,
        step_label=lambda state: STEP_LABELS.get(state, state),
        local_href=local_href,
        link_label=link_label,
        role_label=lambda role: ROLE_LABELS.get(role, str(role)),
        category_label=lambda category: CATEGORY_LABELS.get(category, "Notice"),
        plan_label=lambda plan: PLAN_LABELS.get(plan, plan),
        status_label=lambda status: STATUS_LABELS.get(status, status),
        rule_label=lambda rule: RULE_LABELS.get(rule, rule),
        threshold_label=threshold_label,
        claim_label=lambda status: CLAIM_LABELS.get(status, status),
        delivery_label=lambda status: DELIVERY_LABELS.get(status, status),
        outcome_label=lambda outcome: OUTCOME_LABELS.get(outcome, outcome),
    )
    environment.globals.update(globals_)
    environment.globals.setdefault("_", english_words)
    return environment
