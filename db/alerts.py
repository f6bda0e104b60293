"""Ops alerts: stuck claims and failed deliveries, each recorded once and published once.

An alert row is unique per (kind, thing), so raising it again changes nothing. Publishing
takes unpublished rows with SKIP LOCKED and marks them in the same transaction, so two
sweepers never publish the same alert; a crash between the publish and the commit can
publish it a second time (at least once), never zero times.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from db.tenancy import TenantTx

STUCK_GRACE = timedelta(minutes=30)  # a claim this old with nobody notified is stuck


@dataclass(frozen=True)
class StuckClaim:
    ledger_id: int
    rule: str
    subject_kind: str
    subject_id: int
    threshold: str
    due_on: date
    claimed_at: datetime


# A claim whose notifications (or, for a digest, its email) were never written: nobody
# has been told, in any channel.
_STUCK = """
    SELECT l.id, l.rule, l.subject_kind, l.subject_id, l.threshold, l.due_on, l.claimed_at
    FROM notification_ledger l
    WHERE l.status = 'claimed' AND l.claimed_at < now() - %(grace)s::interval
      AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.ledger_id = l.id)
      AND NOT EXISTS (SELECT 1 FROM digests g JOIN notification_deliveries d ON d.digest_id = g.id
                      WHERE g.ledger_id = l.id)
"""


def stuck_claims(tx: TenantTx, older_than: timedelta = STUCK_GRACE) -> list[StuckClaim]:
    rows = tx.conn.execute(_STUCK + " ORDER BY l.claimed_at, l.id", {"grace": older_than}).fetchall()
    return [
        StuckClaim(int(str(r[0])), str(r[1]), str(r[2]), int(str(r[3])), str(r[4]),
                   r[5], r[6])  # type: ignore[arg-type]
        for r in rows
    ]


def raise_alerts(tx: TenantTx, stuck_grace: timedelta = STUCK_GRACE) -> int:
    """Record an alert for every stuck claim and failed delivery not alerted yet."""
    row = tx.conn.execute(
        f"""
        WITH stuck AS ({_STUCK}), raised AS (
            INSERT INTO ops_alerts (kind, ref_id, summary)
            SELECT 'stuck_claim', s.id,
                   format('claim %%s (%%s %%s/%%s, %%s, due %%s) has notified nobody since %%s',
                          s.id, s.rule, s.subject_kind, s.subject_id, s.threshold, s.due_on,
                          to_char(s.claimed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI"Z"'))
            FROM stuck s
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
        {"grace": stuck_grace},
    ).fetchone()
    return 0 if row is None else int(str(row[0]))


@dataclass(frozen=True)
class Alert:
    id: int
    kind: str
    ref_id: int
    summary: str


def take_unpublished(tx: TenantTx, limit: int = 100) -> list[Alert]:
    """Unpublished alerts, locked for this transaction (another sweeper skips them)."""
    rows = tx.conn.execute(
        """
        SELECT id, kind, ref_id, summary FROM ops_alerts
        WHERE published_at IS NULL ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
        """,
        [limit],
    ).fetchall()
    return [Alert(int(str(r[0])), str(r[1]), int(str(r[2])), str(r[3])) for r in rows]


def mark_published(tx: TenantTx, alert_ids: list[int]) -> None:
    tx.conn.execute(
        "UPDATE ops_alerts SET published_at = now() WHERE id = ANY(%s) AND published_at IS NULL",
        [alert_ids],
    )
