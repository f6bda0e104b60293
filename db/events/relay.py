"""The relay's side of the outbox: which tenants have events to evaluate, and the claim.

An event row is the durable intent (db/events/outbox.py writes it in the host's transaction). The
relay claims committed rows by status and lease, never by a "last id seen": identity order
is not commit order, and a watermark skips the row that committed late.

- ``claim_events`` takes up to ``limit`` ready rows of one tenant with FOR UPDATE SKIP
  LOCKED: pending ones, and processing ones whose lease ran out (the worker that claimed
  them died). It claims nothing while another batch of the tenant is in flight under a live
  lease: one batch per tenant at a time is what keeps a tenant with a backlog of a hundred
  thousand events from filling the evaluation queue ahead of everyone else.
- An event claimed ``max_attempts`` times without being evaluated is failed, with the
  reason, and shown to ops (``tocsin events status``); it is never silently dropped.
- ``tenants_with_ready_events`` asks many schemas at once (one statement per chunk of
  schemas), for the polling fallback.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from psycopg import sql

from db.platform.pool import connection
from db.platform.tenancy import Tenant, TenantTx, not_migrated_is_an_error
from domain.events.states import EVENT, EventStatus

__all__ = [
    "CHUNK",
    "READY",
    "Backlog",
    "ClaimedBatch",
    "backlog",
    "claim_events",
    "release_batch",
    "tenants_with_ready_events",
]

READY = "(status = 'pending' OR (status = 'processing' AND lease_until < now()))"
CHUNK = 200  # schemas per statement when looking for ready events


@dataclass(frozen=True)
class ClaimedBatch:
    token: UUID | None
    event_ids: list[int]
    failed: int  # events given up on by this claim (too many attempts)
    in_flight: bool  # nothing claimed because a batch of this tenant is still leased


# The claim in one statement (one round trip), every part reading the same snapshot:
# - busy: a batch of this tenant is still in flight under a live lease, so nothing is taken;
# - gave_up: ready events claimed max_attempts times already are failed, with the reason;
# - batch/claimed: the oldest other ready events, leased to one claim token.
_CLAIM = f"""
WITH busy AS (
    SELECT EXISTS (SELECT 1 FROM events WHERE status = 'processing' AND lease_until >= now()) AS b
), gave_up AS (
    UPDATE events SET status = 'failed', lease_until = NULL,
           last_error = coalesce(last_error, 'no evaluation finished') ||
                        ' (given up after ' || attempts || ' attempts)'
    WHERE id IN (SELECT id FROM events WHERE {READY} AND attempts >= %(max)s
                 AND NOT (SELECT b FROM busy)
                 FOR UPDATE SKIP LOCKED)
      AND {EVENT.where(to=EventStatus.FAILED)}
    RETURNING id
), batch AS (
    SELECT id FROM events WHERE {READY} AND attempts < %(max)s AND NOT (SELECT b FROM busy)
    ORDER BY recorded_at, id LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), token AS (SELECT gen_random_uuid() AS t), claimed AS (
    UPDATE events e SET status = 'processing', claim_token = token.t,
           lease_until = now() + make_interval(secs => %(lease)s), attempts = attempts + 1
    FROM batch, token WHERE e.id = batch.id AND {EVENT.where(to=EventStatus.PROCESSING, alias="e")}
    RETURNING e.id
)
SELECT (SELECT b FROM busy), (SELECT count(*) FROM gave_up),
       coalesce((SELECT array_agg(id ORDER BY id) FROM claimed), '{{}}'),
       (SELECT t FROM token)
"""


def claim_events(tx: TenantTx, *, limit: int, lease_seconds: int, max_attempts: int) -> ClaimedBatch:
    row = tx.conn.execute(_CLAIM, {"limit": limit, "lease": lease_seconds, "max": max_attempts}).fetchone()
    assert row is not None  # an aggregate: always one row
    busy, failed, claimed, token = row
    if busy:
        return ClaimedBatch(None, [], 0, True)
    ids = [int(str(i)) for i in claimed]  # type: ignore[attr-defined]
    return ClaimedBatch(UUID(str(token)) if ids else None, ids, int(str(failed)), False)


_HANDED_BACK = EVENT.where(to=EventStatus.PENDING)


def release_batch(tx: TenantTx, event_ids: Sequence[int], error: str) -> int:
    """Hand a batch back (its evaluation failed): pending again at once, with the error, so
    the next relay pass retries it; the attempts count still bounds it."""
    return tx.conn.execute(
        "UPDATE events SET status = 'pending', lease_until = NULL, last_error = %s "
        f"WHERE id = ANY(%s) AND {_HANDED_BACK}",
        [error[:2000], list(event_ids)],
    ).rowcount


def tenants_with_ready_events(tenants: Iterable[Tenant]) -> list[str]:
    """The slugs, among ``tenants``, whose outbox holds an event to claim (in their order)."""
    tenants = list(tenants)
    ready: set[str] = set()
    with connection() as conn, not_migrated_is_an_error():
        for start in range(0, len(tenants), CHUNK):
            chunk = tenants[start:start + CHUNK]
            parts = [
                sql.SQL("SELECT {slug} WHERE EXISTS (SELECT 1 FROM {schema}.events WHERE {ready})").format(
                    slug=sql.Literal(t.slug), schema=sql.Identifier(t.schema), ready=sql.SQL(READY))
                for t in chunk
            ]
            rows = conn.execute(sql.SQL(" UNION ALL ").join(parts)).fetchall()
            ready.update(str(r[0]) for r in rows)
    return [t.slug for t in tenants if t.slug in ready]


@dataclass(frozen=True)
class Backlog:
    tenant: str
    product: str
    pending: int
    processing: int
    failed: int
    oldest: datetime | None  # the oldest event not yet evaluated (pending or processing)
    age: timedelta | None


def backlog(tenants: Iterable[Tenant]) -> list[Backlog]:
    """Per tenant and product: events waiting, in flight and failed, and the oldest waiting
    event's age (PostgreSQL's clock). Tenants with nothing waiting are left out."""
    tenants = list(tenants)
    out: list[Backlog] = []
    with connection() as conn, not_migrated_is_an_error():
        for start in range(0, len(tenants), CHUNK):
            chunk = tenants[start:start + CHUNK]
            parts = [
                sql.SQL(
                    "SELECT {slug}, product, count(*) FILTER (WHERE status = 'pending'), "
                    "count(*) FILTER (WHERE status = 'processing'), "
                    "count(*) FILTER (WHERE status = 'failed'), "
                    "min(recorded_at) FILTER (WHERE status IN ('pending', 'processing')), "
                    "now() - min(recorded_at) FILTER (WHERE status IN ('pending', 'processing')) "
                    "FROM {schema}.events WHERE status IN ('pending', 'processing', 'failed') "
                    "GROUP BY product"
                ).format(slug=sql.Literal(t.slug), schema=sql.Identifier(t.schema))
                for t in chunk
            ]
            for r in conn.execute(sql.SQL(" UNION ALL ").join(parts) + sql.SQL(" ORDER BY 1, 2")).fetchall():
                out.append(Backlog(str(r[0]), str(r[1]), int(str(r[2])), int(str(r[3])), int(str(r[4])),
                                   r[5], r[6]))  # type: ignore[arg-type]
    return out
