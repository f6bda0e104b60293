"""What the emails of claimed deliveries are made of, read in the claim's transaction (late
binding: the recipient's language and zone, the client's and the rule's names, the tenant's
brand as they are when the email goes, not when the notice was prepared).

One statement for a batch's deliveries (plus one per digest among them), so composing an
email adds no round trip per delivery.

Each context carries the tenant's template for its kind and locale, when one was saved
(db/delivery/email_templates.py); a template editor's test email carries the template being
tested and is composed from the sample facts the editor previews (db/delivery/template_samples.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from db.delivery.email_templates import current_templates
from db.delivery.template_samples import sample_facts
from db.platform.tenancy import TenantTx
from domain.delivery.email_content import DEFAULT_COLOUR, Brand
from domain.delivery.email_kinds import KINDS, DigestEntry, EmailFacts, kind_of
from domain.delivery.email_templates import EmailTemplate
from domain.people.locales import SHIPPED_LOCALES, resolve_locale

__all__ = ["LOGO_PATH", "BrandRow", "EmailContext", "email_contexts", "read_brand"]

LOGO_PATH = "/brand/{slug}/logo/"  # + the logo's digest: the portal serves it there, cached for good


@dataclass(frozen=True)
class BrandRow:
    display_name: str  # the tenant's name when the brand names none
    colour: str
    sender_name: str
    reply_to: str
    footer: str
    default_locale: str | None
    logo_sha256: str | None
    logo_type: str | None
    slug: str = ""

    def brand(self, portal_url: str) -> Brand:
        """The brand an email shows; the logo by absolute URL (mail clients fetch it)."""
        path = LOGO_PATH.replace("{slug}", self.slug)
        logo = f"{portal_url}{path}{self.logo_sha256[:16]}" if self.logo_sha256 else None
        return Brand(self.display_name, self.colour, logo, self.footer)


@dataclass(frozen=True)
class EmailContext:
    facts: EmailFacts
    zone: str  # the recipient's time zone: dates and "in 7 days" are theirs
    brand: BrandRow
    template: EmailTemplate | None = None  # the tenant's for this kind and locale; None: the shipped copy


def read_brand(tx: TenantTx) -> BrandRow:
    row = tx.conn.execute(
        "SELECT display_name, colour, sender_name, reply_to, footer, default_locale, logo_sha256, "
        "logo_type FROM tenant_brand").fetchone()
    if row is None:
        return BrandRow(tx.tenant.name, DEFAULT_COLOUR, "", "", "", None, None, None, tx.tenant.slug)
    name, colour, sender, reply_to, footer, locale, sha, kind = (None if v is None else str(v) for v in row)
    return BrandRow(name or tx.tenant.name, colour or DEFAULT_COLOUR, sender or "", reply_to or "",
                    footer or "", locale, sha, kind, tx.tenant.slug)


_CONTEXT = """
SELECT d.id, n.category, n.title, n.body, n.data, u.display_name,
       coalesce(u.time_zone, uc.time_zone, %(zone)s), u.locale, uc.locale,
       c.name, l.threshold, l.due_on, r.name, s.title, g.id, g.period, g.period_date
FROM notification_deliveries d
LEFT JOIN notifications n ON n.id = d.notification_id
LEFT JOIN digests g ON g.id = d.digest_id
JOIN users u ON u.id = coalesce(n.recipient_user_id, g.user_id)
LEFT JOIN clients uc ON uc.id = u.client_id
LEFT JOIN notification_ledger l ON l.id = n.ledger_id
LEFT JOIN clients c ON l.subject_kind = 'client' AND c.id = l.subject_id
LEFT JOIN rules r ON r.id = (n.data ->> 'rule_id')::bigint
LEFT JOIN subjects s ON s.id = (n.data ->> 'subject_id')::bigint
WHERE d.id = ANY(%(ids)s)
"""

_DIGEST_ITEMS = """
SELECT n.title, n.body, n.data ->> 'href', c.name, r.name, l.rule = 'licence',
       CASE WHEN n.data ? 'event_id' AND n.data ->> 'event_id' IS NOT NULL THEN NULL ELSE l.due_on END
FROM notification_deliveries d
JOIN notifications n ON n.id = d.notification_id
LEFT JOIN notification_ledger l ON l.id = n.ledger_id
LEFT JOIN clients c ON l.subject_kind = 'client' AND c.id = l.subject_id
LEFT JOIN rules r ON r.id = (n.data ->> 'rule_id')::bigint
WHERE d.in_digest_id = %s
ORDER BY c.name NULLS LAST, r.name NULLS FIRST, d.batched_at, d.id
"""


def email_contexts(tx: TenantTx, delivery_ids: list[int]) -> dict[int, EmailContext]:
    """Each delivery's email context, by delivery id (deliveries that do not exist are left out)."""
    if not delivery_ids:
        return {}
    brand = read_brand(tx)
    templates = current_templates(tx)
    rows = tx.conn.execute(_CONTEXT, {"ids": delivery_ids, "zone": tx.tenant.time_zone}).fetchall()
    out = {}
    for (delivery_id, category, title, body, data, name, zone, user_locale, client_locale,
         client_name, threshold, due_on, rule_name, subject_title, digest_id, period,
         period_date) in rows:
        data = data if isinstance(data, dict) else {}
        locale = resolve_locale(_text(user_locale), _text(client_locale), brand.default_locale)
        event_id = data.get("event_id")
        entries: tuple[DigestEntry, ...] = ()
        if digest_id is not None:
            entries = _digest_entries(tx, int(str(digest_id)))
        facts = EmailFacts(
            category=_text(category), title=_text(title) or "", body=_text(body) or "",
            href=_href(data), locale=locale, tenant_name=brand.display_name,
            recipient_name=str(name or ""), client_name=_text(client_name),
            threshold=_text(threshold), due_on=due_on if isinstance(due_on, date) else None,
            rule_name=_text(rule_name), subject_title=_text(subject_title),
            event_id=int(event_id) if isinstance(event_id, int) else None,
            inviter=_text(data.get("inviter")), digest_period=_text(period),
            digest_date=period_date if isinstance(period_date, date) else None,
            digest=entries, data=data,
        )
        test = data.get("template_test")
        if isinstance(test, dict) and _testable(test):
            facts, zone = sample_facts(tx, str(test["kind"]), str(test["locale"]),
                                       int(test["recipient"]), str(test.get("about") or ""),
                                       brand.display_name)
            template: EmailTemplate | None = EmailTemplate(
                str(test["kind"]), str(test["locale"]), str(test["subject"]),
                str(test["preheader"]), str(test["body"]))
        else:
            template = templates.get((kind_of(facts), facts.locale))
        out[int(str(delivery_id))] = EmailContext(facts, str(zone), brand, template)
    return out


def _testable(test: dict[str, Any]) -> bool:
    return (test.get("kind") in KINDS and test.get("locale") in SHIPPED_LOCALES
            and isinstance(test.get("recipient"), int)
            and all(isinstance(test.get(b), str) for b in ("subject", "preheader", "body")))


def _digest_entries(tx: TenantTx, digest_id: int) -> tuple[DigestEntry, ...]:
    rows = tx.conn.execute(_DIGEST_ITEMS, [digest_id]).fetchall()
    return tuple(
        DigestEntry(_text(client), _text(rule), bool(licence), str(title), str(body), _text(href),
                    due_on if isinstance(due_on, date) else None)
        for title, body, href, client, rule, licence, due_on in rows)


def _href(data: dict[str, Any]) -> str | None:
    return _text(data.get("href"))


def _text(value: object) -> str | None:
    return None if value is None else str(value)
