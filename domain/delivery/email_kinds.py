"""The email kinds, each built once as an EmailContent from what the send-time read found
(EmailFacts): licence milestones, expiry and grace, the closing, the renewal, invitations,
rule notices, obligation notices and digests.

The words are the recipient's language's (``Words``: gettext's two calls) and dates and
counts are formatted for the recipient's locale in the recipient's zone (``Formats``); both
are passed in, so this module stays pure. Every English string here is a gettext message id
(extracted by `make translations`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Protocol

from domain.delivery.email_content import (
    MAX_DIGEST_LINES,
    Action,
    Brand,
    DigestGroup,
    DigestLine,
    EmailContent,
    paragraphs_of,
)
from domain.messages import N_
from domain.notices.licence import COPY, RENEWED

__all__ = [
    "KINDS",
    "DigestEntry",
    "EmailFacts",
    "Formats",
    "Links",
    "Words",
    "build_email",
    "kind_of",
]

KINDS = ("licence_reminder", "licence_expiry", "licence_grace", "licence_closed", "licence_renewed",
         "invitation", "rule_notice", "obligation_notice", "notice", "digest")


class Words(Protocol):
    def gettext(self, message: str, /) -> str: ...

    def ngettext(self, singular: str, plural: str, n: int, /) -> str: ...


class Formats(Protocol):
    def long_date(self, value: date, /) -> str: ...  # "7 December 2026", "7. Dezember 2026"

    def days_from_today(self, value: date, /) -> str: ...  # "in 7 days", "dans 7 jours"

    def number(self, value: int, /) -> str: ...


@dataclass(frozen=True)
class DigestEntry:
    client: str | None  # the client the item is about (a licence), or None
    rule: str | None  # the rule that fired it; None for a licence milestone or another notice
    licence: bool  # a licence milestone
    title: str
    body: str
    href: str | None
    due_on: date | None


@dataclass(frozen=True)
class EmailFacts:
    """What one delivery's email is made of, read at send time (late binding)."""

    category: str | None  # None for a digest
    title: str  # the inbox row's (the tenant's own words for a rule notice)
    body: str
    href: str | None
    locale: str
    tenant_name: str
    recipient_name: str = ""
    client_name: str | None = None
    threshold: str | None = None  # the ledger's: a milestone, or a time rule's offset
    due_on: date | None = None
    rule_name: str | None = None
    subject_title: str | None = None
    event_id: int | None = None
    inviter: str | None = None
    digest_period: str | None = None  # daily | weekly
    digest_date: date | None = None
    digest: tuple[DigestEntry, ...] = ()
    data: Mapping[str, object] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Links:
    portal_url: str  # no trailing slash
    unsubscribe_url: str | None = None

    def absolute(self, href: str | None) -> str:
        if not href:
            return self.portal_url + "/"
        return href if href.startswith(("https://", "http://")) else self.portal_url + href


_REMINDERS = ("d90", "d60", "d30", "d14", "d7", "d1")
_GRACE = ("grace1", "grace3", "grace7")


def kind_of(facts: EmailFacts) -> str:
    if facts.category is None:
        return "digest"
    if facts.category == "license_expiring" and facts.threshold in COPY:
        if facts.threshold in _REMINDERS:
            return "licence_reminder"
        if facts.threshold in _GRACE:
            return "licence_grace"
        return {"expiry": "licence_expiry", "closed": "licence_closed",
                RENEWED: "licence_renewed"}[facts.threshold]
    if facts.category == "member_invite":
        return "invitation"
    if facts.rule_name is not None:
        return "rule_notice" if facts.event_id is not None else "obligation_notice"
    return "notice"


def build_email(facts: EmailFacts, brand: Brand, links: Links, words: Words,
                formats: Formats) -> EmailContent:
    """The content of one email, in the recipient's language."""
    _ = words.gettext
    kind = kind_of(facts)
    builder = _BUILDERS[kind]
    subject, preheader, paragraphs, action, why, groups, more = builder(facts, links, words, formats)
    return EmailContent(
        kind=kind, locale=facts.locale, subject=subject, preheader=preheader, heading=subject,
        paragraphs=paragraphs, why=why, brand=brand, action=action, groups=groups, more=more,
        preferences_label=_("Manage your notification preferences"),
        preferences_url=links.absolute("/preferences"),
        unsubscribe_label=_("Stop these emails") if links.unsubscribe_url else "",
        unsubscribe_url=links.unsubscribe_url,
        footer_note=_("Sent by Tocsin on behalf of {tenant}.").replace("{tenant}", facts.tenant_name),
    )


_Built = tuple[str, str, tuple[str, ...], Action | None, str, tuple[DigestGroup, ...], str]


def _licence(facts: EmailFacts, links: Links, words: Words, formats: Formats) -> _Built:
    _ = words.gettext
    client = facts.client_name or facts.tenant_name
    when = formats.long_date(facts.due_on) if facts.due_on else ""
    title_id, body_id = COPY[str(facts.threshold)]
    subject = _(title_id).replace("{client}", client).replace("{date}", when)
    body = _(body_id).replace("{client}", client).replace("{date}", when)
    kind = kind_of(facts)
    if kind == "licence_reminder" and facts.due_on:
        preheader = _("Access for {client} ends {relative}.").replace("{client}", client).replace(
            "{relative}", formats.days_from_today(facts.due_on))
        label = _("Renew access")
    elif kind in ("licence_expiry", "licence_grace"):
        preheader, label = body, _("Reactivate access")
    else:
        preheader, label = body, _("Open your portal")
    milestone = _MILESTONE_NAMES.get(str(facts.threshold), str(facts.threshold))
    why = _("You receive this because you use the portal of {client}, and its licence reached "
            "this milestone: {milestone}.").replace("{client}", client).replace(
                "{milestone}", _(milestone))
    return (subject, preheader, paragraphs_of(body), Action(label, links.absolute(facts.href)),
            why, (), "")


_MILESTONE_NAMES = {
    "d90": N_("90 days before expiry"), "d60": N_("60 days before expiry"),
    "d30": N_("30 days before expiry"), "d14": N_("14 days before expiry"),
    "d7": N_("7 days before expiry"), "d1": N_("1 day before expiry"), "expiry": N_("expiry"),
    "grace1": N_("1 day after expiry"), "grace3": N_("3 days after expiry"),
    "grace7": N_("7 days after expiry"), "closed": N_("account closed"), RENEWED: N_("renewal"),
}


def _invitation(facts: EmailFacts, links: Links, words: Words, formats: Formats) -> _Built:
    _ = words.gettext
    tenant = facts.tenant_name
    by = facts.inviter or _("An administrator")
    subject = _("You are invited to {tenant} on Tocsin").replace("{tenant}", tenant)
    body = _("{inviter} has invited you to join {tenant}. Open the link to choose a password; "
             "it works once and expires in a few days.")
    body = body.replace("{inviter}", by).replace("{tenant}", tenant)
    why = _("You receive this because {inviter} entered your address to invite you to "
            "{tenant}.").replace("{inviter}", by).replace("{tenant}", tenant)
    return (subject, body, paragraphs_of(body), Action(_("Accept the invitation"),
            links.absolute(facts.href)), why, (), "")


def _notice(facts: EmailFacts, links: Links, words: Words, formats: Formats) -> _Built:
    """A rule's notice: the tenant's own words (rendered from its template when the notice was
    prepared), inside the layout; the why line names the rule and the subject."""
    _ = words.gettext
    paragraphs = paragraphs_of(facts.body) or (facts.title,)
    subject_name = facts.subject_title or str(facts.data.get("subject") or "")
    kind = kind_of(facts)
    if kind == "obligation_notice":
        why = _("You receive this because the rule “{rule}” watches a due date of {subject}.")
        if facts.due_on:
            paragraphs += (_("Due {date} ({relative}).").replace("{date}", formats.long_date(
                facts.due_on)).replace("{relative}", formats.days_from_today(facts.due_on)),)
    elif kind == "rule_notice":
        why = _("You receive this because the rule “{rule}” matched {subject}.")
    else:
        why = _("You receive this because of your role in {tenant}.")
    why = (why.replace("{rule}", facts.rule_name or "").replace("{subject}", subject_name or "?")
           .replace("{tenant}", facts.tenant_name))
    return (facts.title, paragraphs[0][:150], paragraphs, Action(_("Open it in your portal"),
            links.absolute(facts.href)), why, (), "")


def _digest(facts: EmailFacts, links: Links, words: Words, formats: Formats) -> _Built:
    _ = words.gettext
    count = len(facts.digest)
    number = formats.number(count)
    if facts.digest_period == "weekly":
        subject = words.ngettext("Weekly digest: {count} notification",
                                 "Weekly digest: {count} notifications", count)
    else:
        subject = words.ngettext("Daily digest: {count} notification",
                                 "Daily digest: {count} notifications", count)
    subject = subject.replace("{count}", number)
    on = formats.long_date(facts.digest_date) if facts.digest_date else ""
    intro = _("Everything batched for you up to {date}, grouped by client and rule.").replace(
        "{date}", on)
    order: dict[str, list[DigestEntry]] = {}
    for entry in facts.digest:
        rule = entry.rule or (_("Licence") if entry.licence else "")
        heading = " · ".join(part for part in (entry.client, rule) if part)
        order.setdefault(heading, []).append(entry)
    groups, shown = [], 0
    for heading, entries in order.items():
        lines = []
        for entry in entries:
            if shown >= MAX_DIGEST_LINES:
                break
            shown += 1
            when = (_("due {date}").replace("{date}", formats.long_date(entry.due_on))
                    if entry.due_on else "")
            lines.append(DigestLine(entry.title, " ".join(entry.body.split())[:300], when,
                                    links.absolute(entry.href) if entry.href else None))
        if lines:
            label = words.ngettext("{count} notification", "{count} notifications",
                                   len(entries)).replace("{count}", formats.number(len(entries)))
            groups.append(DigestGroup(heading or _("Other notifications"), label, tuple(lines)))
    more = ""
    if count > shown:
        more = _("And {count} more in your portal.").replace("{count}", formats.number(count - shown))
    why = _("You receive this digest because you chose to get these notifications in a "
            "batch instead of one by one.")
    return (subject, intro, (intro,), Action(_("Open your inbox"), links.absolute("/inbox")), why,
            tuple(groups), more)


_BUILDERS = {
    "licence_reminder": _licence, "licence_expiry": _licence, "licence_grace": _licence,
    "licence_closed": _licence, "licence_renewed": _licence, "invitation": _invitation,
    "rule_notice": _notice, "obligation_notice": _notice, "notice": _notice, "digest": _digest,
}
