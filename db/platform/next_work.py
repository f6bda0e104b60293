"""The next-work summary (control.next_work): per tenant, the next instant at which a scan,
a sweep or a digest build can find work there, so that a tick (the scan's, the sweep's, the
digest's) visits only the tenants whose instant has come.

The scan's part is described here; the sweep's and the digest's (control migration 0061)
work the same way, with their own columns, their own triggers (tenant migration 0061: the
deliveries, claims, alerts, provider events and webhook deliveries that leave a sweep work;
batched items and digest schedules) and the same lock: ``begin_visit``, ``record_next`` and
``tenants_due`` take the kind. Their instants are computed by db/delivery/sweep.py and
db/delivery/digests.py in the run's own transaction.

Who keeps it right:

- the scan writes it (``record_next_scan``), from what it computed in its own transaction
  (db/notices/scan_horizon.py);
- every change to what a scan reads marks the tenant due at the next tick, in the same
  transaction: the triggers of tenant migration 0060 on clients, subjects and their facts,
  rules, the working calendar and deferred deliveries, and control migration 0060's trigger on
  a tenant's zone and status. Code that changes something a scan reads outside those tables
  calls ``note_scan_work(tx)``;
- a full pass: a tenant whose last completed scan is older than FULL_SCAN_HOURS is visited
  whatever the summary says, and a scan that finds work the summary said was not there
  counts it (``ScanVisit.summary_said_idle``; the scan actor's metric and warning).

The race the handshake closes: a scan computes the instant from what it sees, and a change
committed after it looked must not be overwritten by that instant. A scan starts with
``begin_scan_visit``, which takes an exclusive advisory lock on the tenant (so it waits for
every transaction that changed something and has not committed: their triggers hold the same
lock shared) and sets the row to 'under way' ('infinity' with scan_started_at). A change from
then on finds the row not due and marks it due ('-infinity'); the scan's ``record_next_scan``
writes its instant only if the row is still the one it set. A scan that dies leaves the row
under way, due again SCAN_RETRY_SECONDS later.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import psycopg
from psycopg import sql

from db.platform.pool import connection
from db.platform.tenancy import TenantTx, not_migrated_is_an_error

__all__ = [
    "NEXT_WORK_LOCK",
    "SCAN_RETRY_SECONDS",
    "ScanVisit",
    "Visit",
    "WorkKind",
    "begin_scan_visit",
    "begin_visit",
    "mute_own_notes",
    "note_scan_work",
    "record_next",
    "record_next_scan",
    "tenants_due",
    "tenants_due_for_scan",
]

WorkKind = Literal["scan", "sweep", "digest"]

NEXT_WORK_LOCK = 7_160_060  # advisory lock class, with the tenant id as the second key
SCAN_RETRY_SECONDS = 15 * 60  # a run under way for longer than this has died: due again


@dataclass(frozen=True)
class Visit:
    tenant_id: int
    started_at: datetime  # the row's <kind>_started_at as this visit set it
    # The summary held an instant later than the run's as_of (computed by an earlier run,
    # not changed since): whatever this run finds, the summary missed.
    summary_said_idle: bool
    kind: WorkKind = "scan"


ScanVisit = Visit


def _columns(kind: WorkKind) -> dict[str, sql.Identifier]:
    """The summary's two columns of ``kind``, for sql.SQL(...).format(**...)."""
    return {"next": sql.Identifier(f"next_{kind}_at"), "started": sql.Identifier(f"{kind}_started_at")}


# One round trip, the statements run one after another: the lock first, in a statement of
# its own, so that the row is read (and set) with a snapshot taken after it, which sees what
# the transactions it waited for committed. Committed without waiting for the WAL flush
# (transaction-local): a crash can lose only a suffix of the WAL, which leaves the summary
# as an earlier moment of its history, when it was right; the scan's own commit, which waits
# for the flush, makes it durable first anyway.
_LOCK = ("SELECT pg_advisory_xact_lock(%s, id::int), set_config('synchronous_commit', 'off', true) "
         "FROM control.tenants WHERE slug = %s")
# Compared in SQL: psycopg cannot read the infinities as datetimes.
_OLD = sql.SQL("SELECT n.tenant_id, n.{started} IS NULL AND n.{next} > %s "
              "FROM control.next_work n JOIN control.tenants t ON t.id = n.tenant_id "
              "WHERE t.slug = %s FOR UPDATE OF n")
_UNDER_WAY = sql.SQL(
    "INSERT INTO control.next_work (tenant_id, {next}, {started}) "
    "SELECT id, 'infinity', clock_timestamp() FROM control.tenants WHERE slug = %s "
    "ON CONFLICT (tenant_id) DO UPDATE "
    "SET {next} = 'infinity', {started} = EXCLUDED.{started} "
    "RETURNING tenant_id, {started}")


def begin_scan_visit(slug: str, as_of: datetime) -> Visit | None:
    """Mark a scan of ``slug`` at ``as_of`` under way, once every uncommitted change to what
    the scan reads has committed. In a transaction of its own, before the scan's; None when
    the slug names no tenant (the scan itself then says so)."""
    return begin_visit("scan", slug, as_of)


def begin_visit(kind: WorkKind, slug: str, as_of: datetime) -> Visit | None:
    """Mark a run of ``kind`` in ``slug`` at ``as_of`` under way (see begin_scan_visit)."""
    columns = _columns(kind)
    with connection() as conn, not_migrated_is_an_error():
        try:
            with conn.pipeline():
                conn.execute("BEGIN")
                conn.execute(_LOCK, [NEXT_WORK_LOCK, slug])
                old_cursor = conn.execute(_OLD.format(**columns), [as_of, slug])
                started_cursor = conn.execute(_UNDER_WAY.format(**columns), [slug])
                conn.execute("COMMIT")
        finally:
            if conn.info.transaction_status in (psycopg.pq.TransactionStatus.INTRANS,
                                                psycopg.pq.TransactionStatus.INERROR):
                conn.execute("ROLLBACK")
        old, started = old_cursor.fetchone(), started_cursor.fetchone()
    if started is None:
        return None
    assert isinstance(started[1], datetime)
    return Visit(int(str(started[0])), started[1], old is not None and bool(old[1]), kind)


def mute_own_notes(tx: TenantTx, kind: WorkKind = "scan") -> None:
    """In a run's transaction: its own writes (for a scan an expiry, claims, deferred
    deliveries; for a sweep moved leases, raised alerts) do not mark its tenant due for a
    run of the same kind; the instant it records already counts them."""
    tx.conn.execute("SELECT set_config(%s, %s, true)", [f"tocsin.{kind}_work_noted", tx.tenant.schema])


def note_scan_work(tx: TenantTx) -> None:
    """Mark ``tx``'s tenant due at the next tick, in ``tx``: for code that changes something a
    scan reads outside the tables whose triggers do this already (tenant migration 0060:
    clients, subjects and their facts, rules, the working calendar, deferred deliveries).
    Cheap, and safe to call more than once."""
    tx.conn.execute("SELECT control.note_scan_work_in(%s)", [tx.tenant.schema])


def record_next_scan(visit: Visit, next_at: datetime | None) -> bool:
    """After the scan has committed: its tenant's next instant (None: nothing ahead), unless
    something changed since the visit began or another scan began after it. True when it
    was written."""
    return record_next(visit, next_at)


def record_next(visit: Visit, next_at: datetime | None) -> bool:
    """After the run has committed: its tenant's next instant of the visit's kind (see
    record_next_scan)."""
    columns = _columns(visit.kind)
    with connection() as conn:
        try:
            with conn.pipeline():  # one round trip; not waiting for the flush (see _LOCK)
                conn.execute("BEGIN")
                conn.execute("SELECT set_config('synchronous_commit', 'off', true)")
                computed = ", computed_at = clock_timestamp() " if visit.kind == "scan" else " "
                written = conn.execute(sql.SQL(
                    "UPDATE control.next_work SET {next} = coalesce(%s::timestamptz, 'infinity'), "
                    "{started} = NULL" + computed
                    + "WHERE tenant_id = %s AND {started} = %s AND {next} = 'infinity' "
                    "RETURNING tenant_id").format(**columns),
                    [next_at, visit.tenant_id, visit.started_at])
                conn.execute("COMMIT")
        finally:
            if conn.info.transaction_status in (psycopg.pq.TransactionStatus.INTRANS,
                                                psycopg.pq.TransactionStatus.INERROR):
                conn.execute("ROLLBACK")
        return written.fetchone() is not None


def tenants_due_for_scan(as_of: datetime, full_scan_hours: float) -> list[str]:
    """The active tenants a tick at ``as_of`` visits, the tenants scanned longest ago first
    (db/platform/runs.py fan_out_order): those whose next instant has come, those without a
    summary yet, those whose scan has been under way for too long, and those whose last
    completed scan is older than ``full_scan_hours`` (the full pass, which checks the
    summary)."""
    return tenants_due("scan", as_of, full_scan_hours)


def tenants_due(kind: WorkKind, as_of: datetime, full_hours: float) -> list[str]:
    """The active tenants a fan-out of ``kind`` at ``as_of`` visits (see tenants_due_for_scan;
    the full pass counts from the tenant's last completed run of that kind)."""
    columns = _columns(kind)
    with connection() as conn, not_migrated_is_an_error():
        rows = conn.execute(sql.SQL(
            "SELECT t.slug FROM control.tenants t "
            "LEFT JOIN control.next_work n ON n.tenant_id = t.id "
            "LEFT JOIN control.completed_runs r ON r.tenant_id = t.id AND r.kind = %(kind)s "
            "WHERE t.status = 'active' AND ("
            "  n.tenant_id IS NULL OR n.{next} <= %(as_of)s"
            "  OR n.{started} < clock_timestamp() - make_interval(secs => %(retry)s)"
            "  OR r.completed_at IS NULL"
            "  OR r.completed_at < clock_timestamp() - make_interval(secs => %(full)s)) "
            "ORDER BY r.completed_at ASC NULLS FIRST, t.slug").format(**columns),
            {"kind": kind, "as_of": as_of, "retry": SCAN_RETRY_SECONDS, "full": full_hours * 3600},
        ).fetchall()
    return [str(r[0]) for r in rows]
