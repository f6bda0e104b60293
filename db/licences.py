"""The licence scan: guarded expiry and closing, and the set-based milestone claim.

Every statement here may run twice, or eight times at once, for the same tenant and
instant: the unique key on notification_ledger and the status guards on clients decide
who wins; losers skip. Rows are always locked and inserted in one fixed key order
(subject id, then threshold), so concurrent scans wait for each other instead of
deadlocking.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from db.tenancy import TenantTx
from domain.licence import GRACE_DAYS, RULE, SUBJECT_KIND, Stage, window_table

# A client's local date is at most this many days away from the UTC date (UTC-12..UTC+14).
_ZONE_SLACK = timedelta(days=1)


@dataclass(frozen=True)
class ClaimCounts:
    expired: int = 0  # clients this scan moved active -> expired
    closed: int = 0  # clients this scan moved expired -> closed
    claimed: int = 0  # ledger rows claimed (to be sent)
    skipped: int = 0  # ledger rows recorded as skipped (their window had passed)


def _local_today(alias: str = "c") -> str:
    """SQL for a client's calendar date at the scan's instant, in its own zone."""
    return f"(%(as_of)s::timestamptz AT TIME ZONE coalesce({alias}.time_zone, %(tenant_tz)s))::date"


_EXPIRE = f"""
WITH lapsed AS (
    SELECT c.id FROM clients c
    WHERE c.status = 'active' AND c.access_expires_on <= {_local_today()}
    ORDER BY c.id
    FOR UPDATE
), expired AS (
    -- The guard: only a row still active becomes expired, so only one scan ever sees it.
    UPDATE clients c SET status = 'expired', updated_at = now()
    FROM lapsed
    WHERE c.id = lapsed.id AND c.status = 'active'
    RETURNING c.id, c.access_expires_on, {_local_today()} AS local_today
), events AS (
    INSERT INTO license_events (client_id, event, access_expires_on, threshold, actor)
    SELECT id, 'expired', access_expires_on, 'expiry', 'system:scan' FROM expired
)
INSERT INTO notification_ledger
    (rule, subject_kind, subject_id, threshold, due_on, status, status_reason, local_date)
SELECT %(rule)s, %(subject_kind)s, e.id, 'expiry', e.access_expires_on,
       CASE WHEN e.local_today < e.access_expires_on + %(expiry_ends)s THEN 'claimed' ELSE 'skipped' END,
       CASE WHEN e.local_today < e.access_expires_on + %(expiry_ends)s THEN NULL
            ELSE 'window passed before the expiry was observed' END,
       e.local_today
FROM expired e
ORDER BY e.id
ON CONFLICT ON CONSTRAINT notification_once DO NOTHING
RETURNING status
"""

_CLOSE = f"""
WITH ended AS (
    SELECT c.id FROM clients c
    WHERE c.status = 'expired' AND c.access_expires_on + %(grace_days)s <= {_local_today()}
    ORDER BY c.id
    FOR UPDATE
), closed AS (
    UPDATE clients c SET status = 'closed', updated_at = now()
    FROM ended
    WHERE c.id = ended.id AND c.status = 'expired'
    RETURNING c.id, c.access_expires_on, {_local_today()} AS local_today
), events AS (
    INSERT INTO license_events (client_id, event, access_expires_on, threshold, actor)
    SELECT id, 'closed', access_expires_on, 'closed', 'system:scan' FROM closed
)
INSERT INTO notification_ledger
    (rule, subject_kind, subject_id, threshold, due_on, status, local_date)
SELECT %(rule)s, %(subject_kind)s, c.id, 'closed', c.access_expires_on, 'claimed', c.local_today
FROM closed c
ORDER BY c.id
ON CONFLICT ON CONSTRAINT notification_once DO NOTHING
RETURNING status
"""

# Reminders speak to active clients, grace nudges to expired ones. Every window that has
# begun yields a row: claimed if today is still inside it, skipped if a later one has begun.
# Runs after the expiry (so a client expired by this scan gets its grace nudge, and its
# missed reminders are recorded) and before the close (so grace windows that passed
# unobserved are recorded before the client leaves the scan's range).
_CLAIM = f"""
WITH w AS (
    SELECT * FROM unnest(
        %(thresholds)s::text[], %(starts)s::int[], %(ends)s::int[],
        %(enterprise_only)s::bool[], %(stages)s::text[]
    ) AS w(threshold, starts, ends, enterprise_only, stage)
    WHERE stage IN ('{Stage.REMINDER.value}', '{Stage.GRACE.value}')
), candidates AS (
    SELECT c.id, c.access_expires_on, c.plan, c.status, {_local_today()} AS local_today
    FROM clients c
    WHERE c.status IN ('active', 'expired') AND c.access_expires_on <= %(horizon)s
), begun AS (
    SELECT c.id, w.threshold, w.stage, c.status, c.access_expires_on, c.local_today,
           w.ends IS NOT NULL AND c.local_today >= c.access_expires_on + w.ends AS passed
    FROM candidates c
    JOIN w ON c.access_expires_on + w.starts <= c.local_today
          AND (NOT w.enterprise_only OR c.plan = 'enterprise')
), due AS (
    SELECT * FROM begun b
    -- A window that has passed is recorded (skipped) whatever the status; one that is
    -- open is claimed only if it speaks to the client's current status.
    WHERE b.passed
       OR (b.stage = '{Stage.REMINDER.value}' AND b.status = 'active')
       OR (b.stage = '{Stage.GRACE.value}' AND b.status = 'expired')
), claimed AS (
    INSERT INTO notification_ledger
        (rule, subject_kind, subject_id, threshold, due_on, status, status_reason, local_date)
    SELECT %(rule)s, %(subject_kind)s, d.id, d.threshold, d.access_expires_on,
           CASE WHEN d.passed THEN 'skipped' ELSE 'claimed' END,
           CASE WHEN d.passed THEN 'a later milestone''s window had begun' END,
           d.local_today
    FROM due d
    ORDER BY d.id, d.threshold, d.access_expires_on
    ON CONFLICT ON CONSTRAINT notification_once DO NOTHING
    RETURNING subject_id, threshold, due_on, status
), events AS (
    INSERT INTO license_events (client_id, event, access_expires_on, threshold, actor)
    SELECT subject_id, 'reminder', due_on, threshold, 'system:scan'
    FROM claimed WHERE status = 'claimed'
)
SELECT status FROM claimed
"""


def _parameters(as_of: datetime, tenant_tz: str) -> dict[str, object]:
    windows = window_table()
    expiry = next(w for w in windows if w.stage is Stage.EXPIRY)
    assert expiry.ends is not None
    # No client's local date can be later than the UTC date plus a day, and no milestone
    # opens earlier than the cadence's first offset: clients expiring after this horizon
    # have nothing due, and the (status, access_expires_on) index skips them.
    horizon = as_of.astimezone(UTC).date() + _ZONE_SLACK - timedelta(days=min(w.starts for w in windows))
    return {
        "as_of": as_of,
        "tenant_tz": tenant_tz,
        "rule": RULE,
        "subject_kind": SUBJECT_KIND,
        "grace_days": GRACE_DAYS,
        "expiry_ends": expiry.ends,
        "horizon": horizon,
        "thresholds": [w.threshold for w in windows],
        "starts": [w.starts for w in windows],
        "ends": [w.ends for w in windows],
        "enterprise_only": [w.enterprise_only for w in windows],
        "stages": [w.stage.value for w in windows],
    }


def _tally(statuses: list[tuple[object, ...]]) -> tuple[int, int]:
    claimed = sum(1 for (s, *_) in statuses if s == "claimed")
    return claimed, len(statuses) - claimed


def claim_due_milestones(tx: TenantTx, as_of: datetime) -> ClaimCounts:
    """Expire lapsed clients, close those past grace, and claim every due milestone, each
    computed from the explicit instant ``as_of`` in the client's own time zone."""
    if as_of.tzinfo is None:
        raise ValueError("as_of must be an aware datetime (an instant)")
    params = _parameters(as_of, tx.tenant.time_zone)
    conn = tx.conn
    expired = conn.execute(_EXPIRE, params).fetchall()
    claimed_rows = conn.execute(_CLAIM, params).fetchall()
    closed = conn.execute(_CLOSE, params).fetchall()
    e_claimed, e_skipped = _tally(expired)
    r_claimed, r_skipped = _tally(claimed_rows)
    return ClaimCounts(
        expired=len(expired),
        closed=len(closed),
        claimed=e_claimed + len(closed) + r_claimed,
        skipped=e_skipped + r_skipped,
    )


def local_today(tx: TenantTx, client_id: int, as_of: datetime) -> date:
    row = tx.conn.execute(
        f"SELECT {_local_today()} FROM clients c WHERE c.id = %(id)s",
        {"as_of": as_of, "tenant_tz": tx.tenant.time_zone, "id": client_id},
    ).fetchone()
    assert row is not None and isinstance(row[0], date)
    return row[0]
