"""The notification ledger: turning claims into inbox rows and deliveries (db/evidence.py reads it).

Preparation is idempotent by construction: inbox rows carry an idempotency key derived
from (ledger row, recipient) and deliveries are unique per (notification, channel), so a
claim prepared twice (or by two scans at once) yields one of each.
"""

from __future__ import annotations

from db.tenancy import TenantTx
from domain.licence import CATEGORY, COPY, RULE

# Turns claimed licence rows into inbox notifications and email deliveries. Recipients
# are bound here, late: the client's active users and the tenant's active admins.
_NOTIFY = """
WITH copy AS (
    SELECT * FROM unnest(%(copy_thresholds)s::text[], %(copy_titles)s::text[],
                         %(copy_bodies)s::text[]) AS copy(threshold, title, body)
), to_notify AS (
    SELECT l.id AS ledger_id, l.threshold, l.due_on, c.id AS client_id, c.name AS client_name
    FROM notification_ledger l JOIN clients c ON c.id = l.subject_id
    WHERE l.id = ANY(%(ledger_ids)s) AND l.status = 'claimed'
), recipients AS (
    SELECT t.*, u.id AS user_id, '/licence' AS href
    FROM to_notify t JOIN users u ON u.client_id = t.client_id AND u.deactivated_at IS NULL
    UNION ALL
    SELECT t.*, a.id AS user_id, '/clients/' || t.client_id AS href
    FROM to_notify t
    CROSS JOIN (SELECT id FROM users WHERE role = 'admin' AND deactivated_at IS NULL) a
), notified AS (
    INSERT INTO notifications
        (recipient_user_id, ledger_id, category, title, body, data, idempotency_key)
    SELECT r.user_id, r.ledger_id, %(category)s,
           replace(replace(copy.title, '{client}', r.client_name),
                   '{date}', to_char(r.due_on, 'FMDD FMMonth YYYY')),
           replace(replace(copy.body, '{client}', r.client_name),
                   '{date}', to_char(r.due_on, 'FMDD FMMonth YYYY')),
           jsonb_build_object('href', r.href, 'client_id', r.client_id,
                              'threshold', r.threshold, 'due_on', r.due_on),
           'ledger:' || r.ledger_id || ':user:' || r.user_id
    FROM recipients r JOIN copy USING (threshold)
    ORDER BY r.ledger_id, r.user_id
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id
)
INSERT INTO notification_deliveries (notification_id, channel)
SELECT id, 'email' FROM notified ORDER BY id
ON CONFLICT (notification_id, channel) DO NOTHING
"""


def notify_claims(tx: TenantTx, ledger_ids: list[int]) -> None:
    """Write the inbox rows and email deliveries of claimed licence rows, idempotently:
    inbox rows are keyed by (ledger row, recipient), deliveries by (notification, channel)."""
    if not ledger_ids:
        return
    thresholds = list(COPY)
    tx.conn.execute(
        _NOTIFY,
        {
            "ledger_ids": ledger_ids,
            "category": CATEGORY,
            "copy_thresholds": thresholds,
            "copy_titles": [COPY[t][0] for t in thresholds],
            "copy_bodies": [COPY[t][1] for t in thresholds],
        },
    )


def prepare_claims(tx: TenantTx) -> int:
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
    notify_claims(tx, ledger_ids)
    return len(ledger_ids)
