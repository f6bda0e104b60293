"""A tenant's email templates: the one in use per kind and locale, every saved version (who,
when, what changed), restores, the admins' drafts for the live preview, the test email, and
the deliveries that went out with the shipped copy because their template failed.

The checks are domain.delivery.email_templates'; every save and restore is audited.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import uuid4

from psycopg.rows import class_row

from db.delivery.deliveries import schedule_deliveries
from db.delivery.inbox import add_to_inbox
from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx
from domain.delivery.email_templates import (
    BLOCKS,
    EmailTemplate,
    template_diff,
    template_problems,
    valid_kind_and_locale,
)
from domain.errors import InvalidInput, NotFound

__all__ = [
    "FallenBack",
    "StoredTemplate",
    "TemplateInvalid",
    "TemplateVersion",
    "current_templates",
    "load_draft",
    "record_template_fallback",
    "restore_version",
    "save_draft",
    "save_template",
    "send_template_test",
    "stored_template",
    "stored_templates",
    "template_versions",
    "templates_fallen_back",
]


MAX_INT4 = 2**31 - 1  # the largest version number the column holds


class TemplateInvalid(InvalidInput):
    """A template that does not parse (or passes a limit): why, by block, with line and column."""

    def __init__(self, problems: dict[str, str]) -> None:
        super().__init__("; ".join(f"{block}: {why}" for block, why in problems.items()))
        self.problems = problems


@dataclass(frozen=True)
class StoredTemplate:
    template: EmailTemplate
    version: int
    updated_at: datetime
    updated_by: str  # the admin's name or address ("" when the account is gone)


def _template(kind: object, locale: object, subject: object, preheader: object,
              body: object) -> EmailTemplate:
    return EmailTemplate(str(kind), str(locale), str(subject), str(preheader), str(body))


def current_templates(tx: TenantTx) -> dict[tuple[str, str], EmailTemplate]:
    """Every template in use, by (kind, locale): one small read per batch of emails."""
    rows = tx.conn.execute("SELECT kind, locale, subject, preheader, body FROM email_templates").fetchall()
    return {(str(r[0]), str(r[1])): _template(*r) for r in rows}


_STORED = """
SELECT t.kind, t.locale, t.subject, t.preheader, t.body, t.version, t.updated_at,
       coalesce(nullif(u.display_name, ''), u.email, '')
FROM email_templates t LEFT JOIN users u ON u.id = t.updated_by
"""


def _stored(row: tuple[object, ...]) -> StoredTemplate:
    updated_at = row[6]
    assert isinstance(updated_at, datetime)
    return StoredTemplate(_template(*row[:5]), int(str(row[5])), updated_at, str(row[7]))


def stored_templates(tx: TenantTx) -> dict[tuple[str, str], StoredTemplate]:
    return {(s.template.kind, s.template.locale): s
            for s in (_stored(tuple(r)) for r in tx.conn.execute(_STORED).fetchall())}


def stored_template(tx: TenantTx, kind: str, locale: str) -> StoredTemplate | None:
    valid_kind_and_locale(kind, locale)
    row = tx.conn.execute(_STORED + " WHERE t.kind = %s AND t.locale = %s", [kind, locale]).fetchone()
    return None if row is None else _stored(tuple(row))


def save_template(tx: TenantTx, user_id: int, template: EmailTemplate, *,
                  restored_from: int | None = None) -> int:
    """Save ``template`` as the kind's next version for its locale: TemplateInvalid (line and
    column) when a block does not parse; the version number otherwise. Audited."""
    valid_kind_and_locale(template.kind, template.locale)
    problems = template_problems(template)
    if problems:
        raise TemplateInvalid(problems)
    before = stored_template(tx, template.kind, template.locale)
    row = tx.conn.execute(
        """
        INSERT INTO email_templates AS t (kind, locale, subject, preheader, body, version, updated_by)
        VALUES (%(kind)s, %(locale)s, %(subject)s, %(preheader)s, %(body)s, 1, %(user)s)
        ON CONFLICT (kind, locale) DO UPDATE
            SET subject = EXCLUDED.subject, preheader = EXCLUDED.preheader, body = EXCLUDED.body,
                version = t.version + 1, updated_at = now(), updated_by = EXCLUDED.updated_by
        RETURNING version
        """,
        {"kind": template.kind, "locale": template.locale, "subject": template.subject,
         "preheader": template.preheader, "body": template.body, "user": user_id}).fetchone()
    assert row is not None
    version = int(str(row[0]))
    tx.conn.execute(
        "INSERT INTO email_template_versions (kind, locale, version, subject, preheader, body, "
        "saved_by, restored_from) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        [template.kind, template.locale, version, template.subject, template.preheader,
         template.body, user_id, restored_from])
    blocks = {name: template.block(name) for name in BLOCKS}
    record_audit(tx, "email_template.restore" if restored_from else "email_template.save",
                 "email_template", f"{template.kind}/{template.locale}",
                 before=None if before is None else {
                     "version": before.version, **{n: before.template.block(n) for n in BLOCKS}},
                 after={"version": version, "restored_from": restored_from, **blocks})
    return version


@dataclass(frozen=True)
class TemplateVersion:
    version: int
    saved_at: datetime
    saved_by: str
    restored_from: int | None
    diff: list[str]  # what this save changed from the version before (or the shipped default)


def template_versions(tx: TenantTx, kind: str, locale: str) -> list[TemplateVersion]:
    """Every saved version, newest first, each with what it changed."""
    valid_kind_and_locale(kind, locale)
    rows = tx.conn.execute(
        """
        SELECT v.version, v.saved_at, coalesce(nullif(u.display_name, ''), u.email, ''),
               v.restored_from, v.subject, v.preheader, v.body
        FROM email_template_versions v LEFT JOIN users u ON u.id = v.saved_by
        WHERE v.kind = %s AND v.locale = %s ORDER BY v.version
        """, [kind, locale]).fetchall()
    out, previous = [], None
    for version, saved_at, by, restored, subject, preheader, body in rows:
        template = _template(kind, locale, subject, preheader, body)
        assert isinstance(saved_at, datetime)
        out.append(TemplateVersion(int(str(version)), saved_at, str(by),
                                   None if restored is None else int(str(restored)),
                                   template_diff(previous, template)))
        previous = template
    return out[::-1]


def restore_version(tx: TenantTx, user_id: int, kind: str, locale: str, version: int) -> int:
    """Save an old version's blocks as the next version (history is never rewritten)."""
    valid_kind_and_locale(kind, locale)
    if not 1 <= version <= MAX_INT4:
        raise NotFound(f"no version {version} of the {kind} template ({locale})")
    row = tx.conn.execute(
        "SELECT subject, preheader, body FROM email_template_versions "
        "WHERE kind = %s AND locale = %s AND version = %s", [kind, locale, version]).fetchone()
    if row is None:
        raise NotFound(f"no version {version} of the {kind} template ({locale})")
    return save_template(tx, user_id, _template(kind, locale, *row), restored_from=version)


def save_draft(tx: TenantTx, user_id: int, template: EmailTemplate) -> None:
    """The text an admin is typing, for the preview frames and the test email (not audited:
    nobody but that admin ever receives it)."""
    valid_kind_and_locale(template.kind, template.locale)
    tx.conn.execute(
        """
        INSERT INTO email_template_drafts AS d (user_id, kind, locale, subject, preheader, body)
        VALUES (%s, %s, %s, %s, %s, %s)
        ON CONFLICT (user_id, kind, locale) DO UPDATE
            SET subject = EXCLUDED.subject, preheader = EXCLUDED.preheader, body = EXCLUDED.body,
                updated_at = now()
        """, [user_id, template.kind, template.locale, template.subject, template.preheader,
              template.body])


def load_draft(tx: TenantTx, user_id: int, kind: str, locale: str) -> EmailTemplate | None:
    row = tx.conn.execute(
        "SELECT kind, locale, subject, preheader, body FROM email_template_drafts "
        "WHERE user_id = %s AND kind = %s AND locale = %s", [user_id, kind, locale]).fetchone()
    return None if row is None else _template(*row)


def send_template_test(tx: TenantTx, user_id: int, template: EmailTemplate, about: str) -> int:
    """A test email of ``template`` to the admin who asks, through the real delivery path (an
    inbox row, a delivery, the email worker, the provider): its delivery id. Audited."""
    valid_kind_and_locale(template.kind, template.locale)
    problems = template_problems(template)
    if problems:
        raise TemplateInvalid(problems)
    title = f"Test email: {template.kind.replace('_', ' ')} ({template.locale})"
    test = {"kind": template.kind, "locale": template.locale, "about": about, "recipient": user_id,
            **{name: template.block(name) for name in BLOCKS}}
    item = add_to_inbox(tx, user_id, "member_invite", title,
                        "A test of your organisation's email template, sent to you only.",
                        {"href": f"/settings/email-templates/{template.kind}/{template.locale}",
                         "critical": True, "template_test": test},
                        idempotency_key=f"template-test:{uuid4()}")
    assert item is not None
    delivery = tx.conn.execute(
        "INSERT INTO notification_deliveries (notification_id, channel) VALUES (%s, 'email') RETURNING id",
        [item.id]).fetchone()
    assert delivery is not None
    delivery_id = int(str(delivery[0]))
    schedule_deliveries(tx, [delivery_id])  # handed to the workers once tx commits
    record_audit(tx, "email_template.test", "email_template", f"{template.kind}/{template.locale}",
                 after={"delivery": delivery_id, "about": about})
    return delivery_id


def record_template_fallback(tx: TenantTx, delivery_id: int, template: EmailTemplate,
                             reason: str) -> None:
    """Why this delivery went out with the shipped copy instead of the tenant's template."""
    tx.conn.execute(
        "UPDATE notification_deliveries SET template_fallback = %s, template_fallback_kind = %s, "
        "template_fallback_locale = %s, template_fallback_at = now() WHERE id = %s",
        [reason[:2000], template.kind, template.locale, delivery_id])


@dataclass(frozen=True)
class FallenBack:
    delivery_id: int
    kind: str
    locale: str
    recipient: str
    title: str
    reason: str
    at: datetime


def templates_fallen_back(tx: TenantTx, limit: int = 200) -> list[FallenBack]:
    """Deliveries sent with the shipped copy because their template failed, newest first,
    while that template has not been saved since: saving it is the fix, and takes them off."""
    with tx.conn.cursor(row_factory=class_row(FallenBack)) as cursor:
        return cursor.execute(
            """
            SELECT d.id AS delivery_id, d.template_fallback_kind AS kind,
                   d.template_fallback_locale AS locale,
                   u.email AS recipient, coalesce(n.title, '') AS title,
                   d.template_fallback AS reason, d.template_fallback_at AS at
            FROM notification_deliveries d
            LEFT JOIN notifications n ON n.id = d.notification_id
            LEFT JOIN digests g ON g.id = d.digest_id
            JOIN users u ON u.id = coalesce(n.recipient_user_id, g.user_id)
            WHERE d.template_fallback IS NOT NULL
              AND NOT EXISTS (
                  SELECT 1 FROM email_templates t
                  WHERE t.kind = d.template_fallback_kind AND t.locale = d.template_fallback_locale
                    AND t.updated_at > d.template_fallback_at)
            ORDER BY d.template_fallback_at DESC, d.id DESC
            LIMIT %s
            """, [limit]).fetchall()
