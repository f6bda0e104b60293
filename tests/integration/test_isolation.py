"""Tenant isolation is structural: search_path is transaction-local, and a tenant's scan
touches no other tenant's tables."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.platform.pool import close_pool, connection, open_pool
from db.platform.tenancy import Connection, Tenant, tenant_tx
from tests.integration.builders import add_admin, add_client, ledger

AS_OF = datetime(2027, 4, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def pool_of_one() -> Iterator[None]:
    open_pool(os.environ["DATABASE_URL"], max_size=1)
    yield
    close_pool()


def _search_path() -> str:
    with connection() as conn:
        row = conn.execute("SHOW search_path").fetchone()
    assert row is not None
    return str(row[0])


def test_a_pooled_connection_does_not_carry_a_tenants_search_path_to_the_next_query(
    tenant: Tenant, pool_of_one: None
) -> None:
    default = _search_path()
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute("SHOW search_path").fetchone()
        assert row is not None and str(row[0]).startswith(tenant.schema)
        backend = tx.conn.execute("SELECT pg_backend_pid()").fetchone()
    with connection() as conn:
        assert conn.execute("SELECT pg_backend_pid()").fetchone() == backend  # the same connection
        row = conn.execute("SHOW search_path").fetchone()
    assert row is not None and str(row[0]) == default
    assert tenant.schema not in default


def test_a_scan_of_one_tenant_reads_and_writes_nothing_of_another(make_tenant: object) -> None:
    a: Tenant = make_tenant()  # type: ignore[operator]
    b: Tenant = make_tenant()  # type: ignore[operator]
    for t in (a, b):
        add_admin(t)
        add_client(t, AS_OF.date() + timedelta(days=7))
        add_client(t, AS_OF.date() - timedelta(days=1))

    with tenant_tx(a.slug) as tx:
        # Per-table access counters of this backend; a transaction never flushes them
        # midway, so the difference across the scan is exactly what the scan touched.
        before = _access_counts(tx.conn, a, b)
        counts = claim_due_milestones(tx, AS_OF)
        prepare_claims(tx)
        after = _access_counts(tx.conn, a, b)
    touched = {table for table in after if after[table] != before.get(table)}
    assert counts.claimed == 2
    assert {schema for schema, _ in touched} == {a.schema}
    assert ledger(b) == []


def _access_counts(conn: Connection, *tenants: Tenant) -> dict[tuple[str, str], tuple[int, ...]]:
    rows = conn.execute(
        """
        SELECT schemaname, relname, coalesce(seq_scan, 0), coalesce(idx_scan, 0),
               n_tup_ins, n_tup_upd, n_tup_del
        FROM pg_stat_xact_user_tables WHERE schemaname = ANY(%s)
        """,
        [[t.schema for t in tenants]],
    ).fetchall()
    return {(str(r[0]), str(r[1])): tuple(int(str(v)) for v in r[2:]) for r in rows}
