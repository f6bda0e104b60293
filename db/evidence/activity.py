"""What the evidence page charts: claims, failures and the time from claim to delivery per
day (the tenant's calendar days), deliveries by status, and claims per rule."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from db.platform.tenancy import TenantTx

__all__ = ["DAYS", "Activity", "activity"]

DAYS = 14  # calendar days the daily charts cover, today included


@dataclass(frozen=True)
class Activity:
    days: list[date]
    claims_per_day: list[int]
    failures_per_day: list[int]
    median_minutes_to_delivery: list[float | None]  # per day; None: nothing delivered
    deliveries_by_status: list[tuple[str, int]]
    claims_per_rule: list[tuple[str, int]]  # the last DAYS days


_DAILY = """
    WITH days AS (
        SELECT d::date AS day
        FROM control.tenants t,
             generate_series((now() AT TIME ZONE t.time_zone)::date - (%(days)s - 1),
                             (now() AT TIME ZONE t.time_zone)::date, interval '1 day') d
        WHERE t.slug = %(slug)s
    ), claims AS (
        SELECT (l.claimed_at AT TIME ZONE t.time_zone)::date AS day, count(*) AS n,
               percentile_cont(0.5) WITHIN GROUP (
                   ORDER BY extract(epoch FROM l.delivered_at - l.claimed_at) / 60)
                   FILTER (WHERE l.delivered_at IS NOT NULL) AS median
        FROM notification_ledger l, control.tenants t
        WHERE t.slug = %(slug)s AND l.claimed_at >= now() - make_interval(days => %(days)s + 1)
        GROUP BY 1
    ), failures AS (
        SELECT (a.ended_at AT TIME ZONE t.time_zone)::date AS day, count(*) AS n
        FROM delivery_attempts a, control.tenants t
        WHERE t.slug = %(slug)s AND a.outcome = 'failed'
          AND a.ended_at >= now() - make_interval(days => %(days)s + 1)
        GROUP BY 1
    )
    SELECT d.day, coalesce(c.n, 0), coalesce(f.n, 0), c.median
    FROM days d LEFT JOIN claims c USING (day) LEFT JOIN failures f USING (day)
    ORDER BY d.day
"""


def activity(tx: TenantTx, days: int = DAYS) -> Activity:
    rows = tx.conn.execute(_DAILY, {"slug": tx.tenant.slug, "days": days}).fetchall()
    statuses = tx.conn.execute(
        "SELECT status, count(*) FROM notification_deliveries GROUP BY status "
        "ORDER BY count(*) DESC, status").fetchall()
    rules = tx.conn.execute(
        "SELECT coalesce(r.name, l.rule), count(*) FROM notification_ledger l "
        "LEFT JOIN rules r ON r.id = l.rule_id "
        "WHERE l.claimed_at >= now() - make_interval(days => %s) "
        "GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 12", [days]).fetchall()
    return Activity(
        days=[r[0] for r in rows if isinstance(r[0], date)],
        claims_per_day=[int(str(r[1])) for r in rows],
        failures_per_day=[int(str(r[2])) for r in rows],
        median_minutes_to_delivery=[None if r[3] is None else float(str(r[3])) for r in rows],
        deliveries_by_status=[(str(r[0]), int(str(r[1]))) for r in statuses],
        claims_per_rule=[(str(r[0]), int(str(r[1]))) for r in rules],
    )
