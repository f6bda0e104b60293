"""Tenants in the control schema, and the tenant transaction every tenant query runs in."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, is_dataclass

import psycopg
from psycopg import sql

from db.platform.effects import C, Collected, Effect, carry_out, merged
from db.platform.errors import NotMigrated
from db.platform.migrations import apply_tenant_migrations, ensure_control_schema
from db.platform.pool import connection, set_statement_scope
from domain.errors import Conflict, InvalidInput, NotFound
from domain.people.identity import schema_for, valid_name, valid_slug, valid_zone

__all__ = [
    "Connection",
    "Statement",
    "Tenant",
    "TenantTx",
    "create_tenant",
    "get_tenant",
    "in_schema",
    "list_tenants",
    "not_migrated_is_an_error",
    "set_unknown_outcome_policy",
    "tenant_read_tx",
    "tenant_statement_alone",
    "tenant_statements",
    "tenant_tx",
]

Connection = psycopg.Connection[tuple[object, ...]]

log = logging.getLogger("tocsin.tenancy")


@dataclass(frozen=True)
class Tenant:
    id: int
    slug: str
    name: str
    schema: str
    time_zone: str
    status: str
    unknown_outcome_policy: str = "resend"  # domain.delivery.states.UnknownPolicy


@dataclass(frozen=True)
class TenantTx:
    """An open transaction whose search_path is one tenant's schema (transaction-local)."""

    conn: Connection
    tenant: Tenant
    # What must happen once this transaction has committed, in the order asked for
    # (db/platform/effects.py): never before, since a message or an announcement must not
    # name a row that might still roll back.
    effects: list[Effect] = field(default_factory=list, compare=False, hash=False)

    def after_commit(self, effect: Effect) -> None:
        """Carry out ``effect`` once this transaction has committed; never if it rolls back."""
        self.effects.append(effect)

    def commit_unflushed_if_nothing_leaves(self) -> bool:
        """For a run whose every write is derived from rows already durable and redone by
        the next run if lost (a scan, a sweep): when no effect asked for so far carries
        anything (no email, message or announcement will name what it wrote), its COMMIT
        returns without waiting for the WAL flush (synchronous_commit off, transaction-local).
        A crash can then lose it whole, and nothing outside PostgreSQL acted on it; the next
        run does it again. True when it was switched off. Call it last in the block."""
        if not all(_carries_nothing(e) for e in self.effects):
            return False
        self.conn.execute("SELECT set_config('synchronous_commit', 'off', true)")
        return True

    def pending(self, kind: type[C]) -> C | None:
        """The effects of ``kind`` asked for so far, merged (None when there are none)."""
        return merged(self.effects, kind)

    def take(self, kind: type[C]) -> C | None:
        """The effects of ``kind`` asked for so far, merged and withdrawn: the caller carries
        them out itself once the transaction has committed."""
        found = merged(self.effects, kind)
        self.effects[:] = [e for e in self.effects if not isinstance(e, kind)]
        return found

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A savepoint for the block: if it raises, what it wrote and the effects it asked
        for are undone together, and the transaction goes on."""
        mark = len(self.effects)
        try:
            with self.conn.transaction():
                yield
        except BaseException:
            del self.effects[mark:]
            raise


def _carries_nothing(effect: Effect) -> bool:
    """A data effect whose lists are all empty (SendEmails([]) from a scan that found
    nothing to send); a plain callable, or an effect without fields (a signal), carries
    something."""
    if not isinstance(effect, Collected) or not is_dataclass(effect):
        return False
    names = [f.name for f in fields(effect)]
    return bool(names) and not any(getattr(effect, name) for name in names)


_TENANT_COLUMNS = "id, slug, name, schema_name, time_zone, status, unknown_outcome_policy"


# A tenant transaction's first statement (tenant_tx), by (generic_plans, redoable): the
# tenant's row, with its schema set as the transaction's search_path, and the plan and
# commit settings asked for, all transaction-local (set_config(..., true)).
_BEGIN_LOOKUPS = {
    (generic, redoable): (
        f"SELECT {_TENANT_COLUMNS}, set_config('search_path', schema_name || ', public', true)"
        + (", set_config('plan_cache_mode', 'force_generic_plan', true)" if generic else "")
        + (", set_config('synchronous_commit', 'off', true)" if redoable else "")
        + " FROM control.tenants WHERE slug = %s")
    for generic in (False, True) for redoable in (False, True)
}


def _tenant(row: tuple[object, ...]) -> Tenant:
    return Tenant(int(str(row[0])), str(row[1]), str(row[2]), str(row[3]), str(row[4]), str(row[5]),
                  str(row[6]))


def create_tenant(slug: str, name: str, time_zone: str) -> Tenant:
    """Create the tenant row, its schema and every tenant migration in one transaction:
    a failure anywhere leaves nothing behind."""
    slug, name, time_zone = valid_slug(slug), valid_name(name, "tenant name"), valid_zone(time_zone)
    schema = schema_for(slug)
    with connection() as conn, conn.transaction():
        ensure_control_schema(conn)
        row = conn.execute(
            f"INSERT INTO control.tenants (slug, name, schema_name, time_zone) "
            f"VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING {_TENANT_COLUMNS}",
            [slug, name, schema, time_zone],
        ).fetchone()
        if row is None:
            raise Conflict(f"tenant {slug!r} exists already")
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        apply_tenant_migrations(conn, schema)  # leaves search_path at the new schema
        tenant = _tenant(row)
        from db.evidence.audit import record_audit

        record_audit(TenantTx(conn, tenant), "tenant.create", "tenant", slug,
                     after={"name": name, "time_zone": time_zone})
        return tenant


def list_tenants(*, active_only: bool = False) -> list[Tenant]:
    where = "WHERE status = 'active'" if active_only else ""
    with connection() as conn, not_migrated_is_an_error():
        rows = conn.execute(
            f"SELECT {_TENANT_COLUMNS} FROM control.tenants {where} ORDER BY slug"
        ).fetchall()
    return [_tenant(r) for r in rows]


def set_unknown_outcome_policy(slug: str, policy: str) -> None:
    """What reconciliation does with this tenant's unknown outcomes (resend or hold)."""
    if policy not in ("resend", "hold"):
        raise InvalidInput(f"unknown-outcome policy must be resend or hold, got {policy!r}")
    from db.evidence.audit import record_audit  # the audit log is written in tenant_tx

    with tenant_tx(slug) as tx:  # NotFound for an unknown tenant, nothing written
        tx.conn.execute("UPDATE control.tenants SET unknown_outcome_policy = %s WHERE id = %s",
                        [policy, tx.tenant.id])
        if policy != tx.tenant.unknown_outcome_policy:
            record_audit(tx, "settings.unknown_outcome", "tenant", tx.tenant.slug,
                         before={"unknown_outcome_policy": tx.tenant.unknown_outcome_policy},
                         after={"unknown_outcome_policy": policy})


@contextmanager
def not_migrated_is_an_error() -> Iterator[None]:
    try:
        yield
    except psycopg.errors.UndefinedTable:
        raise NotMigrated("the database has no Tocsin schema yet: run `tocsin migrate`") from None


def _load_tenant(conn: Connection, slug: str) -> Tenant:
    with not_migrated_is_an_error():
        row = conn.execute(
            f"SELECT {_TENANT_COLUMNS} FROM control.tenants WHERE slug = %s", [slug]
        ).fetchone()
    if row is None:
        raise NotFound(f"unknown tenant {slug!r}")
    return _tenant(row)


def get_tenant(slug: str) -> Tenant:
    with connection() as conn:
        return _load_tenant(conn, valid_slug(slug))


@contextmanager
def tenant_tx(slug: str, *, generic_plans: bool = False, redoable: bool = False,
              once_per_tick: bool = False) -> Iterator[TenantTx]:
    """A transaction scoped to one tenant.

    The schema comes from control.tenants, never from the caller, and search_path is set
    with set_config(..., true) — the SET LOCAL form — so it ends with the transaction and a
    pooled connection never carries one tenant's schema into the next request. The effects
    the block asked for (tx.after_commit) run once the transaction has committed.

    Its statements are prepared per schema (db/platform/pool.py ScopedCursor). ``generic_plans``
    makes PostgreSQL keep one plan per prepared statement from its first execution
    (plan_cache_mode, transaction-local) instead of planning each of its first five runs
    anew: for the event path's small, indexed statements, run a few times per tenant and
    connection, planning was most of their cost.

    ``redoable`` is for a transaction whose every write is derived from rows already durable
    and is redone if it is lost (the relay's claim and evaluation of events): its COMMIT
    returns without waiting for the WAL flush (synchronous_commit off, transaction-local).
    A crash of PostgreSQL can then lose it whole, never half: the events go back to their
    lease, which runs out, and are claimed and evaluated again under the ledger's unique
    key. Nothing outside PostgreSQL acts on it before it is flushed: whatever a later
    transaction commits durably (a claim's preparation, its inbox rows and deliveries) flushes
    the WAL up to its own commit, and so this one's with it.

    ``once_per_tick`` is for a run that reaches its tenant once per tick (a scan, a sweep, a
    digest build): its statements are not prepared (db/platform/pool.py set_statement_scope).
    """
    valid_slug(slug)
    with connection() as conn:
        try:
            with not_migrated_is_an_error():
                # One round trip: BEGIN, then find the tenant and scope the transaction to
                # its schema; the lookup's text is the same for every tenant, so the
                # connection prepares it once (db/platform/pool.py) instead of planning it each time.
                with conn.pipeline():
                    conn.execute("BEGIN")
                    found = conn.execute(_BEGIN_LOOKUPS[generic_plans, redoable], [slug])
                row = found.fetchone()
            if row is None:
                raise NotFound(f"unknown tenant {slug!r}")
            tx = TenantTx(conn, _tenant(row))
            set_statement_scope(conn, tx.tenant.schema, prepared=not once_per_tick)
            yield tx
        except BaseException:
            # The block failed (or the lookup did): nothing it wrote stays. A broken
            # connection cannot be rolled back, and the pool discards it anyway.
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.UNKNOWN:
                conn.execute("ROLLBACK")
            raise
        finally:
            set_statement_scope(conn, None)  # the pooled connection goes back untagged
        conn.execute("COMMIT")
    # Reached only when the block and the commit succeeded.
    if tx.effects:
        carry_out(tx.tenant.slug, tx.effects)


# tenant_statement's scoping: the tenant's schema as the transaction's search_path, or a
# schema that cannot exist when the slug names no tenant, so that the statement after it
# fails on its first table instead of reading or writing anywhere else.
# One plan kept per statement (plan_cache_mode, as tenant_tx's generic_plans): a hot path's
# statement planned afresh at every run costs more than running it.
_SCOPE_TO_TENANT = (
    "SELECT set_config('search_path', coalesce((SELECT schema_name || ', public' "
    "FROM control.tenants WHERE slug = %s), 'no tenant by that slug'), true), "
    "set_config('plan_cache_mode', 'force_generic_plan', true)")


Statement = tuple[str, dict[str, object]]  # an SQL text and its parameters


def tenant_statements(slug: str, statements: list[Statement]) -> list[list[tuple[object, ...]]]:
    """A few statements in a tenant transaction of their own, sent with its BEGIN, its
    scoping to the tenant's schema and its COMMIT in one round trip (tenant_tx takes
    three): for statements a hot path runs once per provider call. Each statement's rows;
    NotFound when the slug names no tenant (nothing was written). No after-commit work:
    statements that need some belong in tenant_tx."""
    with connection() as conn:
        try:
            set_statement_scope(conn, schema_for(slug))
            with not_migrated_is_an_error(), conn.pipeline():
                conn.execute("BEGIN")
                scoped = conn.execute(_SCOPE_TO_TENANT, [slug])
                results = [conn.execute(query, params) for query, params in statements]
                conn.execute("COMMIT")
        except psycopg.errors.UndefinedTable:
            found = scoped.fetchone()
            if found is not None and str(found[0]).startswith("no tenant"):
                raise NotFound(f"unknown tenant {slug!r}") from None
            raise
        finally:
            set_statement_scope(conn, None)
            if conn.info.transaction_status in (psycopg.pq.TransactionStatus.INTRANS,
                                                psycopg.pq.TransactionStatus.INERROR):
                conn.execute("ROLLBACK")
        return [result.fetchall() if result.description else [] for result in results]


def tenant_statement_alone(slug: str, statement: sql.Composed,
                           params: dict[str, object]) -> list[tuple[object, ...]]:
    """One statement whose tables are named in the tenant's schema (``in_schema``), run as
    a transaction of its own: no BEGIN, no scoping, no COMMIT, one message each way, and
    none of the client-side work of a pipeline. PostgreSQL commits a statement run outside a
    transaction as it ends, durably (synchronous_commit), before it answers. For the step
    taken before every provider call. Its rows; NotFound when the slug names no tenant
    (nothing was written).

    Its plan is kept only if PostgreSQL finds a generic plan no worse than the custom ones
    (after five runs): give it parameters of one type each time, and no NULL that a custom
    plan could fold away (see db/delivery/deliveries.py _step_params)."""
    with connection() as conn:
        set_statement_scope(conn, schema_for(slug))
        try:
            with not_migrated_is_an_error():
                result = conn.execute(statement, params)
                return result.fetchall() if result.description else []
        except NotMigrated:
            if conn.execute("SELECT 1 FROM control.tenants WHERE slug = %s", [slug]).fetchone() is None:
                raise NotFound(f"unknown tenant {slug!r}") from None
            raise
        finally:
            set_statement_scope(conn, None)


def in_schema(template: str, slug: str) -> sql.Composed:
    """``template`` with ``{schema}`` naming the tenant's schema, as an identifier."""
    return sql.SQL(template).format(schema=sql.Identifier(schema_for(slug)))


@contextmanager
def tenant_read_tx(conn: Connection, slug: str) -> Iterator[TenantTx]:
    """A read-only transaction scoped to one tenant on a connection the caller holds (the
    ledger export's own, outside the process pool). Nothing it runs can write, so it needs
    none of the after-commit work of tenant_tx."""
    valid_slug(slug)
    with conn.transaction():
        conn.execute("SET TRANSACTION READ ONLY")
        tenant = _load_tenant(conn, slug)
        # Transaction-local, as in tenant_tx: the connection goes back without the schema.
        conn.execute("SELECT set_config('search_path', %s, true)", [f"{tenant.schema}, public"])
        yield TenantTx(conn, tenant)
