"""What the template editor previews and tests against: a real recipient of the tenant and
a real client or subject the email is about, made into the EmailFacts that kind of email
has at send time (the milestone, the due date, the rule, the digest's items)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date, timedelta

from db.platform.tenancy import TenantTx
from domain.delivery.email_kinds import DigestEntry, EmailFacts
from domain.errors import NotFound
from domain.notices.licence import RENEWED
from tocsin.core.clock import utcnow

__all__ = ["Choice", "about_choices", "recipient_choices", "sample_facts"]

MAX_CHOICES = 200  # rows a picker lists
_CLIENT_KINDS = ("licence_reminder", "licence_expiry", "licence_grace", "licence_closed",
                 "licence_renewed")
_SUBJECT_KINDS = ("rule_notice", "obligation_notice")
_THRESHOLDS = {"licence_reminder": "d30", "licence_expiry": "expiry", "licence_grace": "grace3",
               "licence_closed": "closed", "licence_renewed": RENEWED}


@dataclass(frozen=True)
class Choice:
    value: str  # "user:3", "client:7", "subject:12"
    label: str


def recipient_choices(tx: TenantTx) -> list[Choice]:
    rows = tx.conn.execute(
        "SELECT id, email, display_name FROM users WHERE deactivated_at IS NULL "
        "ORDER BY role = 'client_user', lower(email) LIMIT %s", [MAX_CHOICES]).fetchall()
    return [Choice(str(r[0]), f"{r[2]} <{r[1]}>" if r[2] else str(r[1])) for r in rows]


def about_choices(tx: TenantTx, kind: str) -> list[Choice]:
    """The clients a licence email, or the subjects a rule's notice, can be about (none for
    the other kinds)."""
    if kind in _CLIENT_KINDS:
        rows = tx.conn.execute("SELECT id, name FROM clients ORDER BY lower(name) LIMIT %s",
                               [MAX_CHOICES]).fetchall()
        return [Choice(f"client:{r[0]}", str(r[1])) for r in rows]
    if kind in _SUBJECT_KINDS:
        rows = tx.conn.execute(
            "SELECT id, coalesce(nullif(title, ''), product || ' ' || kind || ' ' || external_id) "
            "FROM subjects ORDER BY id DESC LIMIT %s", [MAX_CHOICES]).fetchall()
        return [Choice(f"subject:{r[0]}", str(r[1])) for r in rows]
    return []


def _about(tx: TenantTx, kind: str, about: str) -> tuple[str, int] | None:
    """The chosen client or subject, or the first one when none (or a stale one) is chosen."""
    choices = about_choices(tx, kind)
    for choice in choices:
        if choice.value == about:
            break
    else:
        if not choices:
            return None
        choice = choices[0]
    what, _, number = choice.value.partition(":")
    return what, int(number)


_REMINDERS = ((1, "d1"), (7, "d7"), (14, "d14"), (30, "d30"), (60, "d60"), (90, "d90"))  # days, milestone


def _milestone(kind: str, due: date, today: date) -> tuple[str, date]:
    """The milestone a licence email of ``kind`` would have, with a due date that agrees with
    it: the client's own when its reminder window is open (or for a renewal), else a sample."""
    if kind == "licence_reminder":
        days = (due - today).days
        for limit, threshold in _REMINDERS:
            if 1 <= days <= limit:
                return threshold, due
        return "d30", today + timedelta(days=30)
    if kind == "licence_renewed":
        return _THRESHOLDS[kind], due
    back = {"licence_expiry": 0, "licence_grace": 3, "licence_closed": 7}[kind]
    return _THRESHOLDS[kind], today - timedelta(days=back)


def sample_facts(tx: TenantTx, kind: str, locale: str, recipient_id: int, about: str,
                 tenant_name: str) -> tuple[EmailFacts, str]:
    """The facts of a ``kind`` email in ``locale`` to this recipient about this client or
    subject, and the recipient's zone (``tenant_name``: the brand's display name)."""
    if not 1 <= recipient_id < 2**63:  # a bigint: anything else names nobody
        raise NotFound(f"no user {recipient_id}")
    user = tx.conn.execute("SELECT display_name, coalesce(time_zone, %s) FROM users WHERE id = %s",
                           [tx.tenant.time_zone, recipient_id]).fetchone()
    if user is None:
        raise NotFound(f"no user {recipient_id}")
    name, zone = str(user[0]), str(user[1])
    today = utcnow().date()
    base = EmailFacts(category="report_ready", title="", body="", href="/inbox", locale=locale,
                      tenant_name=tenant_name, recipient_name=name)
    chosen = _about(tx, kind, about)
    if kind in _CLIENT_KINDS:
        client, due = tenant_name, today + timedelta(days=30)
        if chosen is not None:
            row = tx.conn.execute("SELECT name, access_expires_on FROM clients WHERE id = %s",
                                  [chosen[1]]).fetchone()
            if row is not None:
                client = str(row[0])
                due = row[1] if isinstance(row[1], date) else due
        threshold, due = _milestone(kind, due, today)
        return replace(base, category="license_expiring", href="/licence", client_name=client,
                       threshold=threshold, due_on=due), zone
    if kind in _SUBJECT_KINDS:
        title = "Case 4711"
        if chosen is not None:
            row = tx.conn.execute(
                "SELECT coalesce(nullif(title, ''), kind || ' ' || external_id) FROM subjects WHERE id = %s",
                [chosen[1]]).fetchone()
            title = str(row[0]) if row else title
        rule = tx.conn.execute("SELECT name FROM rules ORDER BY id LIMIT 1").fetchone()
        rule_name = str(rule[0]) if rule else "Review overdue cases"
        return replace(
            base, category="document_review", title=f"{rule_name}: {title}",
            body=f"{title} needs your attention.", href="/obligations", rule_name=rule_name,
            subject_title=title, event_id=1 if kind == "rule_notice" else None,
            due_on=today + timedelta(days=7) if kind == "obligation_notice" else None), zone
    if kind == "invitation":
        return replace(base, category="member_invite", href="/invitations/example",
                        inviter=name or None), zone
    if kind == "digest":
        rows = tx.conn.execute(
            "SELECT title, body, data ->> 'href' FROM notifications WHERE recipient_user_id = %s "
            "ORDER BY id DESC LIMIT 5", [recipient_id]).fetchall()
        entries = tuple(DigestEntry(None, None, False, str(t), str(b), None if h is None else str(h), None)
                        for t, b, h in rows) or (
            DigestEntry(None, None, False, "Report ready", "Your monthly report is ready.", "/inbox", None),)
        return replace(base, category=None, digest_period="daily", digest_date=today,
                        digest=entries), zone
    return replace(base, title="Your report is ready",
                    body="The quarterly compliance report is ready to read."), zone

