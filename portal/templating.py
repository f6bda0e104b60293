"""The Jinja2 environment: autoescaping on, strict about undefined names, and the filters
that turn stored values into words a person reads."""

from __future__ import annotations

import gettext
from collections.abc import Callable, Mapping
from datetime import date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from babel.dates import format_date, format_time, format_timedelta, get_datetime_format
from jinja2 import Environment, FileSystemLoader, StrictUndefined, pass_context, select_autoescape
from jinja2.runtime import Context

from domain.messages import N_
from domain.people.identity import Role
from domain.people.locales import DEFAULT_LOCALE, LOCALE_NAMES
from portal.language import (
    context_formats,
    context_locale,
    gettext_markup,
    ngettext_markup,
    page_direction,
    request_zone,
)
from portal.links import local_path
from tocsin.core.clock import utcnow
from tocsin.core.i18n import babel_locale, translations

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

# The words of stored codes, translated where the page is written (N_ marks them for the
# catalogs; the filters below look each up in the page's language).
ROLE_LABELS = {
    Role.ADMIN: N_("Administrator"),
    Role.MEMBER: N_("Team member"),
    Role.CLIENT_USER: N_("Client user"),
}
CATEGORY_LABELS = {
    "document_review": N_("Document review"),
    "questionnaire_assigned": N_("Questionnaire"),
    "response_revision": N_("Response revision"),
    "policy_approved": N_("Policy approved"),
    "report_ready": N_("Report ready"),
    "license_expiring": N_("Licence"),
    "member_invite": N_("Invitation"),
    "vendor_questionnaire": N_("Vendor questionnaire"),
    "case_alert": N_("Case alert"),
    "case_update": N_("Case update"),
    "obligation_due": N_("Obligation due"),
}
PLAN_LABELS = {"standard": N_("Standard"), "enterprise": N_("Enterprise")}
STATUS_LABELS = {"active": N_("Active"), "expired": N_("Access paused"), "closed": N_("Closed")}
RULE_LABELS = {"licence": N_("Annual licence")}
THRESHOLD_LABELS = {
    "expiry": N_("Expiry day"), "closed": N_("Account closed"), "renewed": N_("Renewal confirmed"),
    "grace1": N_("1 day after expiry"), "grace3": N_("3 days after expiry"),
    "grace7": N_("7 days after expiry"),
}
CLAIM_LABELS = {"claimed": N_("Claimed"), "skipped": N_("Skipped"), "cancelled": N_("Cancelled")}
DELIVERY_LABELS = {
    "pending": N_("Waiting to send"), "deferred": N_("Held for quiet hours"),
    "batched": N_("In a digest"), "sending": N_("Sending"),
    "accepted": N_("Accepted by the mail service"), "delivered": N_("Delivered"),
    "bounced": N_("Bounced"), "complained": N_("Marked as spam"), "failed": N_("Failed"),
    "unknown": N_("Outcome unknown"), "cancelled": N_("Cancelled"),
}
OUTCOME_LABELS = {
    "accepted": N_("Accepted"), "retry": N_("Failed, retried"), "failed": N_("Failed"),
    "unknown": N_("Outcome unknown"), "cancelled": N_("Cancelled"), None: N_("In progress"),
}


STEP_LABELS = {
    "claimed": N_("Notice claimed"), "skipped": N_("Skipped"), "cancelled": N_("Cancelled"),
    "due": N_("Due now"), "scheduled": N_("Scheduled"), "passed": N_("Window passed"),
}

_ENGLISH = translations(DEFAULT_LOCALE)


def offset_label(offset: int, business_days: bool = False,
                 words: gettext.NullTranslations = _ENGLISH) -> str:
    """'30 days before', 'On the due date', '7 working days after'."""
    if offset == 0:
        return words.gettext("On the due date")
    days = abs(offset)
    if business_days:
        text = (words.ngettext("{count} working day before", "{count} working days before", days)
                if offset < 0 else
                words.ngettext("{count} working day after", "{count} working days after", days))
    else:
        text = (words.ngettext("{count} day before", "{count} days before", days) if offset < 0
                else words.ngettext("{count} day after", "{count} days after", days))
    return text.format(count=days)


def threshold_label(threshold: str, words: gettext.NullTranslations = _ENGLISH) -> str:
    """'30 days before', 'Expiry day', ...: never the internal code."""
    if threshold in THRESHOLD_LABELS:
        return words.gettext(THRESHOLD_LABELS[threshold])
    if threshold.startswith("offset:") and threshold[7:].lstrip("+-").isdigit():
        return offset_label(int(threshold[7:]), words=words)
    if threshold.startswith("tat:"):
        return words.gettext("Turnaround breached")
    if threshold[:1] == "d" and threshold[1:].isdigit():
        days = int(threshold[1:])
        return words.ngettext("{count} day before expiry", "{count} days before expiry",
                              days).format(count=days)
    return threshold


def ago(moment: datetime, now: datetime | None = None, locale: str = DEFAULT_LOCALE) -> str:
    """'just now', '5 minutes ago', 'vor 3 Tagen', 'il y a 2 semaines' (Babel's words)."""
    delta = moment - (now or utcnow())
    if delta.total_seconds() > -60:
        return translations(locale).gettext("just now")
    return format_timedelta(delta, add_direction=True, threshold=1.0,
                            locale=babel_locale(locale))


def local_datetime(moment: datetime, zone: str, locale: str = DEFAULT_LOCALE) -> str:
    """'3 Mar 2026, 09:15' in the reader's zone, in their language's form."""
    local = moment.astimezone(ZoneInfo(zone))
    where = babel_locale(locale)
    pattern = str(get_datetime_format("medium", locale=where)).replace("'", "")  # "{1}, {0}"
    return pattern.format(format_time(local, "short", locale=where),
                          format_date(local.date(), "medium", locale=where))


def short_date(day: date, locale: str = DEFAULT_LOCALE) -> str:
    """'5 Dec 2026', '05.12.2026', '5 déc. 2026'."""
    return format_date(day, "medium", locale=babel_locale(locale))


def long_date(day: date, locale: str = DEFAULT_LOCALE) -> str:
    """'31 March 2027', '31. März 2027', '31 mars 2027'."""
    return format_date(day, "long", locale=babel_locale(locale))


def local_href(data: dict[str, Any]) -> str | None:
    """The notification's deep link if it points into this portal; anything else is dropped."""
    return local_path(data.get("href"))


def link_label(href: str) -> str:
    if href == "/licence" or href.startswith("/clients/"):
        return N_("View licence details")
    return N_("Open")


def _words(context: Context) -> gettext.NullTranslations:
    return translations(context_locale(context))


def _label(labels: Mapping[Any, str]) -> Callable[[Context, Any], str]:
    """A filter: the stored code's words in the page's language (the code itself if unknown)."""
    @pass_context
    def label(context: Context, code: Any) -> str:
        found = labels.get(code)
        return str(code) if found is None else _words(context).gettext(found)
    return label


def build_environment(globals_: dict[str, Any]) -> Environment:
    environment = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(
        ago=pass_context(lambda c, moment: ago(moment, locale=context_locale(c))),
        local_datetime=pass_context(lambda c, moment, zone=None: local_datetime(
            moment, zone or request_zone(c.get("request")), context_locale(c))),
        long_date=pass_context(lambda c, day: long_date(day, context_locale(c))),
        short_date=pass_context(lambda c, day: short_date(day, context_locale(c))),
        number=pass_context(lambda c, value: context_formats(c).number(value)),
        offset_label=pass_context(lambda c, offset, business_days=False: offset_label(
            offset, business_days, _words(c))),
        step_label=_label(STEP_LABELS),
        local_href=local_href,
        link_label=pass_context(lambda c, href: _words(c).gettext(link_label(href))),
        role_label=_label(ROLE_LABELS),
        category_label=pass_context(lambda c, category: _words(c).gettext(
            CATEGORY_LABELS.get(category, N_("Notice")))),
        plan_label=_label(PLAN_LABELS),
        status_label=_label(STATUS_LABELS),
        rule_label=_label(RULE_LABELS),
        threshold_label=pass_context(lambda c, threshold: threshold_label(threshold, _words(c))),
        claim_label=_label(CLAIM_LABELS),
        delivery_label=_label(DELIVERY_LABELS),
        outcome_label=_label(OUTCOME_LABELS),
    )
    # The page's words (portal.language): `_("...")`, `ngettext(...)`, `<html lang dir>`.
    environment.globals.update(_=gettext_markup, gettext=gettext_markup, ngettext=ngettext_markup,
                               page_locale=pass_context(context_locale), page_direction=page_direction,
                               language_names=LOCALE_NAMES)
    environment.globals.update(globals_)
    return environment
