"""The licence scan: guarded expiry and closing, and the set-based milestone claim.

Every statement here may run twice, or eight times at once, for the same tenant and
instant: the unique key on notification_ledger and the status guards on clients decide
who wins; losers skip. Rows are always locked and inserted in one fixed key order
(subject id, then threshold), so concurrent scans wait for each other instead of
deadlocking.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from db.notices.fanout import notify_claims
from db.platform.tenancy import TenantTx
from domain.notices.licence import (
    GRACE_DAYS,
    LICENCE,
    RULE,
    SUBJECT_KIND,
    LicenceStatus,
    Stage,
    window_table,
)

__all__ = ["ClaimCounts", "claim_due_milestones"]

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
    WHERE c.status = 'active'
      AND c.archived_at IS NULL  -- archived: out of the cadence until restored
      AND c.access_expires_on <= %(latest_today)s  -- index range; the exact test follows
      AND c.access_expires_on <= {_local_today()}
    ORDER BY c.id
    FOR UPDATE
), expired AS (
    -- The guard: only a row still active becomes expired, so only one scan ever sees it.
    UPDATE clients c SET status = 'expired', updated_at = now()
    FROM lapsed
    WHERE c.id = lapsed.id AND {LICENCE.where(to=LicenceStatus.EXPIRED, alias="c")}
    RETURNING c.id, c.access_expires_on, {_local_today()} AS local_today
), events AS (
    INSERT INTO license_events (client_id, event, access_expires_on, threshold, actor)
    SELECT id, 'expired', access_expires_on, 'expiry', 'system:scan' FROM expired
), claimed AS (
    INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on,
                                     status, status_reason, local_date, prepared_at)
    SELECT %(rule)s, %(subject_kind)s, e.id, 'expiry', e.access_expires_on,
           CASE WHEN e.late THEN 'skipped' ELSE 'claimed' END,
           CASE WHEN e.late THEN 'window passed before the expiry was observed' END,
           e.local_today,
           CASE WHEN e.late THEN NULL ELSE now() END
    FROM (SELECT *, local_today >= access_expires_on + %(expiry_ends)s AS late FROM expired) e
    ORDER BY e.id
    ON CONFLICT ON CONSTRAINT notification_once DO NOTHING
    RETURNING id, status
)
SELECT id, status FROM claimed
"""

_CLOSE = f"""
WITH ended AS (
    SELECT c.id FROM clients c
    WHERE c.status = 'expired'
      AND c.archived_at IS NULL  -- archived: out of the cadence until restored
      AND c.access_expires_on <= %(latest_today)s - %(grace_days)s
      AND c.access_expires_on + %(grace_days)s <= {_local_today()}
    ORDER BY c.id
    FOR UPDATE
), closed AS (
    UPDATE clients c SET status = 'closed', updated_at = now()
    FROM ended
    WHERE c.id = ended.id AND {LICENCE.where(to=LicenceStatus.CLOSED, alias="c")}
    RETURNING c.id, c.access_expires_on, {_local_today()} AS local_today
), events AS (
    INSERT INTO license_events (client_id, event, access_expires_on, threshold, actor)
    SELECT id, 'closed', access_expires_on, 'closed', 'system:scan' FROM closed
), claimed AS (
    INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on,
                                     status, local_date, prepared_at)
    SELECT %(rule)s, %(subject_kind)s, c.id, 'closed', c.access_expires_on, 'claimed',
           c.local_today, now()
    FROM closed c
    ORDER BY c.id
    ON CONFLICT ON CONSTRAINT notification_once DO NOTHING
    RETURNING id, status
)
SELECT id, status FROM claimed
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
), candidates AS MATERIALIZED (  -- each client's local today computed once, not per window
    SELECT c.id, c.access_expires_on, c.plan, c.status, {_local_today()} AS local_today
    FROM clients c
    WHERE c.status IN ('active', 'expired') AND c.access_expires_on <= %(horizon)s
      AND c.archived_at IS NULL  -- archived: out of the cadence until restored
), begun AS (
    SELECT c.id, w.threshold, w.starts, w.stage, c.status, c.access_expires_on, c.local_today,
           w.ends IS NOT NULL AND c.local_today >= c.access_expires_on + w.ends AS passed
    FROM candidates c
    JOIN w ON c.access_expires_on + w.starts <= c.local_today
          AND (NOT w.enterprise_only OR c.plan = 'enterprise')
), unsettled AS (
    -- One statement writes every begun window of a client at once, so once the row of a
    -- client's latest begun window exists, all earlier ones do too: a replay probes one key
    -- per client instead of one per window. (The cost: windows that only appear later, such
    -- as d90/d60 after an upgrade to enterprise, are not backfilled as skipped.)
    SELECT latest.id FROM (
        SELECT DISTINCT ON (id) id, threshold, access_expires_on
        FROM begun ORDER BY id, starts DESC
    ) latest
    WHERE NOT EXISTS (
        SELECT 1 FROM notification_ledger l
        WHERE l.rule = %(rule)s AND l.subject_kind = %(subject_kind)s AND l.subject_id = latest.id
          AND l.threshold = latest.threshold AND l.due_on = latest.access_expires_on
    )
), due AS (
    SELECT b.* FROM begun b JOIN unsettled u ON u.id = b.id
    -- A window that has passed is recorded (skipped) whatever the status; one that is
    -- open is claimed only if it speaks to the client's current status.
    WHERE b.passed
       OR (b.stage = '{Stage.REMINDER.value}' AND b.status = 'active')
       OR (b.stage = '{Stage.GRACE.value}' AND b.status = 'expired')
), claimed AS (
    INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on,
                                     status, status_reason, local_date, prepared_at)
    SELECT %(rule)s, %(subject_kind)s, d.id, d.threshold, d.access_expires_on,
           CASE WHEN d.passed THEN 'skipped' ELSE 'claimed' END,
           CASE WHEN d.passed THEN 'a later milestone''s window had begun' END,
           d.local_today,
           CASE WHEN d.passed THEN NULL ELSE now() END
    FROM due d
    ORDER BY d.id, d.threshold, d.access_expires_on
    ON CONFLICT ON CONSTRAINT notification_once DO NOTHING
    RETURNING id, subject_id, threshold, due_on, status
), events AS (
    INSERT INTO license_events (client_id, event, access_expires_on, threshold, actor)
    SELECT subject_id, 'reminder', due_on, threshold, 'system:scan'
    FROM claimed WHERE status = 'claimed'
)
SELECT id, status FROM claimed
"""


def _parameters(as_of: datetime, tenant_tz: str) -> dict[str, object]:
    windows = window_table()
    expiry = next(w for w in windows if w.stage is Stage.EXPIRY)
    assert expiry.ends is not None
    # No client's local date can be later than the UTC date plus a day, and no milestone
    # opens earlier than the cadence's first offset: clients expiring after this horizon
    # have nothing due, and the (status, access_expires_on) index skips them.
    latest_today = as_of.astimezone(UTC).date() + _ZONE_SLACK
    horizon = latest_today - timedelta(days=min(w.starts for w in windows))
    return {
        "as_of": as_of,
        "tenant_tz": tenant_tz,
        "rule": RULE,
        "subject_kind": SUBJECT_KIND,
        "grace_days": GRACE_DAYS,
        "expiry_ends": expiry.ends,
        "horizon": horizon,
        "latest_today": latest_today,
        "thresholds": [w.threshold for w in windows],
        "starts": [w.starts for w in windows],
        "ends": [w.ends for w in windows],
        "enterprise_only": [w.enterprise_only for w in windows],
        "stages": [w.stage.value for w in windows],
    }


def _claimed_ids(rows: list[tuple[object, ...]]) -> list[int]:
    return [int(str(ledger_id)) for ledger_id, status in rows if status == "claimed"]


def claim_due_milestones(tx: TenantTx, as_of: datetime) -> ClaimCounts:
    """Expire lapsed clients, close those past grace, and claim every due milestone, each
    computed from the explicit instant ``as_of`` in the client's own time zone."""
    if as_of.tzinfo is None:
        raise ValueError("as_of must be an aware datetime (an instant)")
    params = _parameters(as_of, tx.tenant.time_zone)
    conn = tx.conn
    expired = conn.execute(_EXPIRE, params).fetchall()
    reminders = conn.execute(_CLAIM, params).fetchall()
    closed = conn.execute(_CLOSE, params).fetchall()
    # Claims are written with prepared_at set; their notifications are written now, in the
    # same transaction, so a claim is never committed without them.
    claimed_ids = _claimed_ids(expired) + _claimed_ids(reminders) + _claimed_ids(closed)
    notify_claims(tx, claimed_ids, as_of)
    total = len(expired) + len(reminders) + len(closed)
    return ClaimCounts(
        expired=len(expired),
        closed=len(closed),
        claimed=len(claimed_ids),
        skipped=total - len(claimed_ids),
    )
