"""Fan-out of the notification ledger: turning claims into inbox rows and deliveries
(db/evidence/ledger_view.py reads the ledger).

Preparation is idempotent by construction: inbox rows carry an idempotency key derived
from (ledger row, recipient) and deliveries are unique per (notification, channel), so a
claim prepared twice (or by two scans at once) yields one of each.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from db.delivery.chat_deliveries import queue_chat_deliveries
from db.delivery.sms_deliveries import queue_notice_sms
from db.delivery.webhook_deliveries import queue_notice_webhooks
from db.people.preferences import PRODUCT_PARAMS, RESOLVED_COLUMNS
from db.platform.effects import AnnounceInbox
from db.platform.tenancy import TenantTx
from domain.delivery.preferences import OPTED_OUT
from domain.notices.licence import CATEGORY, COPY, RULE
from tocsin.core.clock import utcnow

__all__ = ["NoticesWritten", "notify_claims", "notify_statement", "prepare_claims", "write_notices"]


@dataclass(frozen=True)
class NoticesWritten:
    inbox_users: set[int]  # users whose inbox gained a visible row (the live push names them)
    emails_due: list[int]  # email deliveries written pending (due now)


def notify_statement(recipients_ctes: str) -> str:
    """The one statement that turns resolved recipients into inbox notifications and email
    deliveries, for the licence and for tenants' rules alike.

    ``recipients_ctes`` are the leading CTEs, the last named `recipients` with the columns
    (ledger_id, user_id, title, body, data): one row per (claim, recipient), already bound
    (late: this runs when the notice is prepared). Each recipient's preference for the
    category (domain.delivery.preferences, in SQL as RESOLVED_COLUMNS) decides in the same
    statement: the inbox row is hidden (archived at once) when in_app is off or the rule
    does not use the inbox; the email is left out when the rule does not email, cancelled
    with the reason (opted out), batched for a digest, deferred to the end of quiet hours
    (unless the category or the rule is critical), or pending. It answers with the users
    whose inbox gained a visible row and the email deliveries due now.

    Parameters: category, critical, in_app_channel, email_channel, now, tenant_zone,
    opted_out and PRODUCT_PARAMS."""
    return f"""
WITH {recipients_ctes}, resolved AS (
    SELECT r.ledger_id, r.user_id, {RESOLVED_COLUMNS},
           u.role <> 'contact' AS has_inbox,  -- a contact never signs in to read one
           quiet_hours_end(%(now)s, coalesce(u.time_zone, %(tenant_zone)s),
                           s.quiet_start, s.quiet_end) AS quiet_end
    FROM recipients r
    JOIN users u ON u.id = r.user_id
    LEFT JOIN notification_preferences up ON up.user_id = r.user_id AND up.category = %(category)s
    LEFT JOIN category_defaults td ON td.category = %(category)s
    LEFT JOIN delivery_schedules s ON s.user_id = r.user_id
), decided AS (
    SELECT ledger_id, user_id, in_app AND has_inbox AND %(in_app_channel)s AS in_app, quiet_end,
           frequency,
           CASE WHEN NOT %(email_channel)s THEN NULL
                WHEN NOT email OR frequency = 'off' THEN 'cancelled'
                WHEN frequency IN ('daily_digest', 'weekly') THEN 'batched'
                WHEN quiet_end IS NOT NULL AND NOT (critical OR %(critical)s) THEN 'deferred'
                ELSE 'pending' END AS status
    FROM resolved
), notified AS (
    INSERT INTO notifications
        (recipient_user_id, ledger_id, category, title, body, data, idempotency_key, archived_at)
    SELECT r.user_id, r.ledger_id, %(category)s, r.title, r.body, r.data,
           'ledger:' || r.ledger_id || ':user:' || r.user_id,
           CASE WHEN d.in_app THEN NULL ELSE now() END
    FROM recipients r
    JOIN decided d ON d.ledger_id = r.ledger_id AND d.user_id = r.user_id
    ORDER BY r.ledger_id, r.user_id
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id, ledger_id, recipient_user_id, archived_at
), delivered AS (
    INSERT INTO notification_deliveries
        (notification_id, channel, status, status_reason, send_after, batch_period, batched_at)
    SELECT n.id, 'email', d.status,
           CASE WHEN d.status = 'cancelled' THEN %(opted_out)s END,
           CASE WHEN d.status = 'deferred' THEN d.quiet_end ELSE now() END,
           CASE WHEN d.status = 'batched' THEN
                CASE d.frequency WHEN 'weekly' THEN 'weekly' ELSE 'daily' END END,
           CASE WHEN d.status = 'batched' THEN %(now)s END
    FROM notified n JOIN decided d ON d.ledger_id = n.ledger_id AND d.user_id = n.recipient_user_id
    WHERE d.status IS NOT NULL
    ORDER BY n.id
    ON CONFLICT (notification_id, channel) DO NOTHING
    RETURNING id, status
)
SELECT 'inbox', recipient_user_id FROM notified WHERE archived_at IS NULL
UNION ALL
SELECT 'email', id FROM delivered WHERE status = 'pending'
UNION ALL
SELECT DISTINCT 'claim', ledger_id FROM notified
"""


def write_notices(
    tx: TenantTx, statement: str, params: dict[str, object], *, category: str, now: datetime | None,
    critical: bool = False, in_app: bool = True, email: bool = True, chat: tuple[str, ...] = (),
    sms: bool = False,
) -> NoticesWritten:
    """Run a notify_statement with the parameters every caller shares; record the users
    whose inbox gained a row for the live push once ``tx`` commits."""
    rows = tx.conn.execute(
        statement,
        {
            **params,
            "category": category,
            "critical": critical,
            "in_app_channel": in_app,
            "email_channel": email,
            "now": now or utcnow(),
            "tenant_zone": tx.tenant.time_zone,
            "opted_out": OPTED_OUT,
            **PRODUCT_PARAMS,
        },
    ).fetchall()
    users = {int(str(r[1])) for r in rows if r[0] == "inbox"}
    if users:
        tx.after_commit(AnnounceInbox(users))
    # The tenant's own systems hear of each claim whose notices were just written (webhooks).
    claims = sorted({int(str(r[1])) for r in rows if r[0] == "claim"})
    queue_notice_webhooks(tx, claims)
    # Slack and Teams, when the rule names them (``chat``) and the tenant enabled them.
    queue_chat_deliveries(tx, claims, list(chat), category=category, critical=critical, now=now)
    # Texts to those who turned SMS on for the category, or to every recipient with a number
    # when the rule names sms (``sms``; decided again when each is claimed).
    queue_notice_sms(tx, claims, rule_chose=sms)
    return NoticesWritten(users, sorted(int(str(r[1])) for r in rows if r[0] == "email"))


# The licence's recipients, bound when the claim is prepared: the client's active users
# and the tenant's active admins; the copy is domain.notices.licence's, with the client and date.
_LICENCE_NOTIFY = notify_statement("""
copy AS (
    SELECT * FROM unnest(%(copy_thresholds)s::text[], %(copy_titles)s::text[],
                         %(copy_bodies)s::text[]) AS copy(threshold, title, body)
), to_notify AS (
    SELECT l.id AS ledger_id, l.threshold, l.due_on, c.id AS client_id, c.name AS client_name
    FROM notification_ledger l JOIN clients c ON c.id = l.subject_id
    WHERE l.id = ANY(%(ledger_ids)s) AND l.status = 'claimed'
), bound AS (
    SELECT t.*, u.id AS user_id, '/licence' AS href
    FROM to_notify t JOIN users u ON u.client_id = t.client_id AND u.deactivated_at IS NULL
    UNION ALL
    SELECT t.*, a.id AS user_id, '/clients/' || t.client_id AS href
    FROM to_notify t
    CROSS JOIN (SELECT id FROM users WHERE role = 'admin' AND deactivated_at IS NULL) a
), recipients AS (
    SELECT b.ledger_id, b.user_id,
           replace(replace(copy.title, '{client}', b.client_name),
                   '{date}', to_char(b.due_on, 'FMDD FMMonth YYYY')) AS title,
           replace(replace(copy.body, '{client}', b.client_name),
                   '{date}', to_char(b.due_on, 'FMDD FMMonth YYYY')) AS body,
           jsonb_build_object('href', b.href, 'client_id', b.client_id,
                              'threshold', b.threshold, 'due_on', b.due_on) AS data
    FROM bound b JOIN copy USING (threshold)
)""")


def notify_claims(tx: TenantTx, ledger_ids: list[int], now: datetime | None = None) -> None:
    """Write the inbox rows and email deliveries of claimed licence rows, idempotently:
    inbox rows are keyed by (ledger row, recipient), deliveries by (notification, channel).
    ``now`` is the instant preferences are judged at (quiet hours, the digest an email
    waits for); the database clock when omitted. The emails are enqueued by the caller's
    schedule_due_deliveries (the scan) or the sweeper."""
    if not ledger_ids:
        return
    thresholds = list(COPY)
    write_notices(
        tx, _LICENCE_NOTIFY,
        {
            "ledger_ids": ledger_ids,
            "copy_thresholds": thresholds,
            "copy_titles": [COPY[t][0] for t in thresholds],
            "copy_bodies": [COPY[t][1] for t in thresholds],
        },
        category=CATEGORY, now=now,
    )


def prepare_claims(tx: TenantTx, now: datetime | None = None) -> int:
    """The repair path: notify claimed licence rows committed without their notifications
    (normally none, since the claiming transaction notifies). SKIP LOCKED leaves a claim
    another transaction is preparing right now to that transaction."""
    rows = tx.conn.execute(
        """
        UPDATE notification_ledger SET prepared_at = now()
        WHERE id IN (
            SELECT id FROM notification_ledger
            WHERE status = 'claimed' AND prepared_at IS NULL AND rule = %s
            ORDER BY id FOR UPDATE SKIP LOCKED
        )
        RETURNING id
        """,
        [RULE],
    ).fetchall()
    ledger_ids = sorted(int(str(r[0])) for r in rows)
    notify_claims(tx, ledger_ids, now)
    return len(ledger_ids)
