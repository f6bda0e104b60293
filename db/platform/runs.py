"""When each tenant's scan, sweep and digest build last completed (control.completed_runs).

Written at the end of a successful run, read by `tocsin status`, /healthz and the
Needs-attention page. Times come from PostgreSQL's clock, for both the record and the
reader's "now": a pinned application clock (tests, replays) must not make the machinery
look stopped or alive, and every process compares against the same clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from db.platform.errors import DatabaseUnavailable
from db.platform.pool import connection
from db.platform.tenancy import TenantTx, not_migrated_is_an_error
from domain.liveness import RunKind

__all__ = ["TenantRuns", "fan_out_order", "last_runs", "last_runs_of_active_tenants", "record_completed"]


@dataclass(frozen=True)
class TenantRuns:
    slug: str
    created_at: datetime  # when the tenant was created: the reference before its first sweep
    scan: datetime | None  # last completed scan, None when none has completed yet
    sweep: datetime | None
    digest: datetime | None
    as_of: datetime  # PostgreSQL's clock when this was read


def record_completed(tx: TenantTx, kind: RunKind) -> None:
    """Record that a run of ``kind`` completed now. Two runs finishing together keep the
    later time, never an earlier one."""
    tx.conn.execute(
        "INSERT INTO control.completed_runs (tenant_id, kind, completed_at) "
        "VALUES (%s, %s, clock_timestamp()) "
        "ON CONFLICT (tenant_id, kind) DO UPDATE "
        "SET completed_at = greatest(control.completed_runs.completed_at, EXCLUDED.completed_at)",
        [tx.tenant.id, kind.value],
    )


def fan_out_order(kind: RunKind) -> list[str]:
    """The active tenants' slugs in the order a fan-out of ``kind`` should send them: the
    tenant whose run completed longest ago first, those that never completed before all.

    A fixed order (by slug) puts the same tenants at the tail of every tick; when the
    workers cannot finish a tick before its messages age out, or the fan-out itself is cut
    short, those tenants are never reached. Ordered by the last completion, a tenant that
    was not reached goes to the front of the next tick: with a budget of B runs per tick,
    every one of N tenants runs at least once every ceil(N / B) ticks. The cursor is the
    completion record itself, in PostgreSQL: two clocks, or a restarted one, agree on it."""
    with connection() as conn, not_migrated_is_an_error():
        rows = conn.execute(
            "SELECT t.slug FROM control.tenants t "
            "LEFT JOIN control.completed_runs r ON r.tenant_id = t.id AND r.kind = %s "
            "WHERE t.status = 'active' "
            "ORDER BY r.completed_at ASC NULLS FIRST, t.slug",
            [kind.value],
        ).fetchall()
    return [str(r[0]) for r in rows]


_RUNS = """
SELECT t.slug, t.created_at,
       max(r.completed_at) FILTER (WHERE r.kind = 'scan'),
       max(r.completed_at) FILTER (WHERE r.kind = 'sweep'),
       max(r.completed_at) FILTER (WHERE r.kind = 'digest'),
       clock_timestamp()
FROM control.tenants t
LEFT JOIN control.completed_runs r ON r.tenant_id = t.id
WHERE {where}
GROUP BY t.id
ORDER BY t.slug
"""


def _runs(row: tuple[object, ...]) -> TenantRuns:
    slug, created, scan, sweep, digest, as_of = row
    assert isinstance(created, datetime) and isinstance(as_of, datetime)
    return TenantRuns(str(slug), created, _instant(scan), _instant(sweep), _instant(digest), as_of)


def _instant(value: object) -> datetime | None:
    return value if isinstance(value, datetime) else None


def last_runs(tx: TenantTx) -> TenantRuns:
    """This tenant's last completed runs (one primary-key lookup per kind)."""
    row = tx.conn.execute(_RUNS.format(where="t.id = %s"), [tx.tenant.id]).fetchone()
    assert row is not None, "the transaction's tenant exists"
    return _runs(row)


def last_runs_of_active_tenants() -> list[TenantRuns]:
    """Every active tenant's last completed runs, in one query."""
    try:
        with connection() as conn, not_migrated_is_an_error():
            rows = conn.execute(_RUNS.format(where="t.status = 'active'")).fetchall()
    except psycopg.OperationalError as error:  # also a pool timeout
        raise DatabaseUnavailable(f"PostgreSQL did not answer: {error}") from None
    return [_runs(r) for r in rows]
