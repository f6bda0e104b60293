"""Ops alerts: stuck claims and failed deliveries, each recorded once and published once.

An alert row is unique per (kind, thing), so raising it again changes nothing. Publishing
takes unpublished rows with SKIP LOCKED and marks them in the same transaction, so two
sweepers never publish the same alert; a crash between the publish and the commit can
publish it a second time (at least once), never zero times.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from db.evidence.ledger_view import STUCK_AFTER, stuck_claims
from db.platform.tenancy import TenantTx

__all__ = ["Alert", "has_unpublished", "mark_published", "raise_alerts", "take_unpublished"]


def raise_alerts(tx: TenantTx, stuck_grace: timedelta = STUCK_AFTER) -> int:
    """Record an alert for every stuck claim (db.evidence.ledger_view.stuck_claims: the same list the
    admins' attention page shows), failed delivery and held unknown outcome not alerted yet."""
    stuck = stuck_claims(tx, stuck_grace)
    row = tx.conn.execute(
        """
        WITH raised AS (
            INSERT INTO ops_alerts (kind, ref_id, summary)
            SELECT 'stuck_claim', s.id,
                   format('claim %%s (%%s %%s/%%s, %%s, due %%s) has not been delivered since %%s',
                          s.id, s.rule, s.subject_kind, s.subject_id, s.threshold, s.due_on,
                          to_char(s.claimed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI"Z"'))
            FROM notification_ledger s WHERE s.id = ANY(%(stuck)s)
            UNION ALL
            SELECT 'failed_delivery', d.id,
                   format('delivery %%s (%%s) failed after %%s attempt(s): %%s',
                          d.id, d.channel, d.attempts, coalesce(d.last_error, 'no error recorded'))
            FROM notification_deliveries d WHERE d.status = 'failed'
            UNION ALL
            SELECT 'unknown_held', d.id,
                   format('delivery %%s is held for review: its outcome is unknown', d.id)
            FROM notification_deliveries d
            WHERE d.status = 'unknown' AND d.status_reason LIKE 'held for review%%'
            ORDER BY 1, 2
            ON CONFLICT (kind, ref_id) DO NOTHING
            RETURNING id
        )
        SELECT count(*) FROM raised
        """,
        {"stuck": [c.ledger_id for c in stuck]},
    ).fetchone()
    return 0 if row is None else int(str(row[0]))


@dataclass(frozen=True)
class Alert:
    id: int
    kind: str
    ref_id: int
    summary: str


def take_unpublished(tx: TenantTx, hold_seconds: float, limit: int = 100) -> list[Alert]:
    """Unpublished alerts not held by another publisher, now held by this one for
    ``hold_seconds``: the caller commits, publishes them outside any transaction, then marks
    them published. If it dies before marking, the hold runs out and they are taken again."""
    rows = tx.conn.execute(
        """
        UPDATE ops_alerts SET publishing_until = now() + make_interval(secs => %s)
        WHERE id IN (SELECT id FROM ops_alerts
                     WHERE published_at IS NULL
                       AND (publishing_until IS NULL OR publishing_until < now())
                     ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
        RETURNING id, kind, ref_id, summary
        """,
        [hold_seconds, limit],
    ).fetchall()
    return [Alert(int(str(r[0])), str(r[1]), int(str(r[2])), str(r[3])) for r in rows]


def mark_published(tx: TenantTx, alert_ids: list[int]) -> None:
    tx.conn.execute(
        "UPDATE ops_alerts SET published_at = now(), publishing_until = NULL "
        "WHERE id = ANY(%s) AND published_at IS NULL",
        [alert_ids],
    )


def has_unpublished(tx: TenantTx) -> bool:
    """Whether any alert waits to be published: lets the sweep skip the publishing
    transaction when, as almost always, none does."""
    row = tx.conn.execute("SELECT EXISTS (SELECT 1 FROM ops_alerts WHERE published_at IS NULL)").fetchone()
    return bool(row and row[0])
