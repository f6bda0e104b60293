"""One EmailFacts per email kind, for a fixture tenant with a brand, with hostile subject data
(markup, quotes, right-to-left text) where a tenant's or a host's words reach the email.
Used by the rendering tests, the browser screenshots and bench/render.py."""

from __future__ import annotations

from datetime import date
from typing import Any

from domain.delivery.email_content import Brand
from domain.delivery.email_kinds import KINDS, DigestEntry, EmailFacts, kind_of

__all__ = ["BRAND", "HOSTILE", "PORTAL", "UNSUBSCRIBE", "ZONE", "sample_facts"]

PORTAL = "https://portal.tocsin.example"
UNSUBSCRIBE = PORTAL + "/unsubscribe/v1.acme.42.license_expiring.sig"
ZONE = "Europe/Berlin"
HOSTILE = "<script>alert(\"x\")</script> O'Brien & \"Söhne\" شركة الأمل"
BRAND = Brand("Acme Compliance", "#0f5132", PORTAL + "/brand/logo/0123456789abcdef",
              "Acme Compliance GmbH\nFriedrichstraße 12\n10117 Berlin, Germany")


def sample_facts(locale: str = "en") -> dict[str, EmailFacts]:
    """Facts of every kind in ``locale``, by kind."""
    due = date(2027, 3, 31)
    base: dict[str, Any] = {"locale": locale, "tenant_name": "Acme Compliance", "recipient_name": "Zoë Weber"}
    licence: dict[str, Any] = {**base, "category": "license_expiring", "title": "", "body": "",
                               "href": "/licence", "client_name": HOSTILE, "due_on": due}
    facts = [
        EmailFacts(**licence, threshold="d30"),
        EmailFacts(**licence, threshold="expiry"),
        EmailFacts(**licence, threshold="grace3"),
        EmailFacts(**licence, threshold="closed"),
        EmailFacts(**licence, threshold="renewed"),
        EmailFacts(**base, category="member_invite", title="", body="",
                   href="/invitations/tok.en", inviter=HOSTILE),
        EmailFacts(**base, category="case_alert", title=f"Large case {HOSTILE}",
                   body=f"Case C-1042 ({HOSTILE}) was opened.\n\nAmount: 1,500,000.",
                   href="/inbox/17", rule_name=f"large case {HOSTILE}", subject_title=HOSTILE,
                   event_id=9, threshold="created"),
        EmailFacts(**base, category="obligation_due", title="Permit P-7 due soon",
                   body="The permit for site 7 must be renewed.", href="/obligations/3",
                   rule_name="permit renewals", subject_title="Permit P-7", threshold="-30",
                   due_on=due),
        EmailFacts(**base, category="report_ready", title="Your report is ready",
                   body="The quarterly report can be downloaded.", href="/inbox/18"),
        EmailFacts(**base, category=None, title="", body="", href=None, digest_period="daily",
                   digest_date=date(2027, 3, 1), digest=(
                       DigestEntry(HOSTILE, None, True, "Access renews in 30 days",
                                   "Access runs until 31 March 2027.", "/licence", due),
                       DigestEntry(HOSTILE, None, True, "Two weeks until access renews",
                                   "Renewal takes one click.", "/licence", due),
                       DigestEntry(None, "large case", False, "Large case C-7",
                                   "Case C-7 was opened.", "/inbox/5", None),
                       DigestEntry(None, None, False, "Report ready", "Download it.", None, None),
                   )),
    ]
    by_kind = {kind_of(f): f for f in facts}
    assert set(by_kind) == set(KINDS), "a sample for every kind"
    return by_kind
