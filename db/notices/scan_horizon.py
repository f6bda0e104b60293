"""When a tenant's next scan can find work: the instant a scan records in the next-work
summary (db/platform/next_work.py), computed in the scan's own transaction, after its
claims, so that what it has just claimed is not counted again.

The earliest of:

- the licence cadence: the next milestone window to open for an active or expired client
  (domain/notices/licence.py CADENCE, the expiry and the close included), at local midnight
  in the client's zone (or the tenant's): every window that had begun by the scan's instant
  was claimed or recorded skipped by the scan itself;
- the time rules: with a turnaround rule enabled, at once (a breach can fall at any hour,
  and is not computed ahead here: such a tenant is visited at every tick); with a due-date
  rule enabled, the next local midnight in any zone of the tenant's subjects (obligation
  windows are calendar or working days, each opening at a local midnight; which of them
  opens next is left to the scan);
- the deliveries waiting for a later instant (quiet hours, a retry) and never enqueued.

None: nothing can become due without a change, and every change marks the tenant due.
"""

from __future__ import annotations

from datetime import datetime

from db.platform.tenancy import TenantTx
from domain.delivery.states import WAITING
from domain.notices.licence import CADENCE

__all__ = ["next_scan_instant"]

_NEXT = """
WITH offsets AS (
    SELECT * FROM unnest(%(offsets)s::int[], %(enterprise_only)s::bool[]) AS o(days, enterprise_only)
), time_rules AS (
    SELECT coalesce(bool_or(definition -> 'trigger' ? 'turnaround'), false) AS turnaround,
           coalesce(bool_or(definition -> 'trigger' ? 'due'), false) AS due
    FROM rules WHERE kind = 'time' AND enabled
)
SELECT least(
    (SELECT min(((c.access_expires_on + o.days)::timestamp)
                AT TIME ZONE coalesce(c.time_zone, %(tenant_tz)s))
     FROM clients c JOIN offsets o ON NOT o.enterprise_only OR c.plan = 'enterprise'
     WHERE c.status IN ('active', 'expired')
       AND c.access_expires_on + o.days
           > (%(as_of)s::timestamptz AT TIME ZONE coalesce(c.time_zone, %(tenant_tz)s))::date),
    (SELECT CASE
         WHEN r.turnaround THEN %(as_of)s::timestamptz
         WHEN r.due THEN (
             SELECT min((((%(as_of)s::timestamptz AT TIME ZONE z.zone)::date + 1)::timestamp)
                        AT TIME ZONE z.zone)
             FROM (SELECT DISTINCT coalesce(s.time_zone, %(tenant_tz)s) AS zone FROM subjects s
                   UNION SELECT %(tenant_tz)s) z)
     END FROM time_rules r),
    (SELECT min(d.send_after) FROM notification_deliveries d
     WHERE d.status = ANY(%(waiting)s) AND d.enqueued_at IS NULL)
)
"""


def next_scan_instant(tx: TenantTx, as_of: datetime) -> datetime | None:
    """The earliest instant after ``as_of`` at which a scan of ``tx``'s tenant can find work
    without anything changing first; None when there is none."""
    row = tx.conn.execute(_NEXT, {
        "offsets": [m.offset_days for m in CADENCE],
        "enterprise_only": [m.enterprise_only for m in CADENCE],
        "tenant_tz": tx.tenant.time_zone,
        "as_of": as_of,
        "waiting": sorted(s.value for s in WAITING),
    }).fetchone()
    value = row[0] if row else None
    return value if isinstance(value, datetime) else None
