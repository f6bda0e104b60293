"""Prepared statements per tenant schema (db/platform/pool.py ScopedCursor): the same statement run
for two tenants is two prepared statements, each planned under its own schema, and never
answers with another tenant's rows; generic plans are asked for only where requested."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role

COUNT = "SELECT count(*) FROM users WHERE email LIKE %s"


def _count(slug: str) -> tuple[int, list[str]]:
    with tenant_tx(slug) as tx:
        # Twice on the same connection: prepared at its second run (db/platform/pool.py PREPARE_AFTER),
        # whichever of the pool's connections this transaction got.
        tx.conn.execute(COUNT, ["%@scope.example"])
        row = tx.conn.execute(COUNT, ["%@scope.example"]).fetchone()
        statements = [str(r[0]) for r in tx.conn.execute(
            "SELECT statement FROM pg_prepared_statements "
            "WHERE statement LIKE 'SELECT count(*) FROM users%'")]
    assert row is not None
    return int(str(row[0])), statements


@pytest.mark.skipif(bool(os.environ.get("TEST_PGBOUNCER")),  # make test-pgbouncer
                    reason="through PgBouncer 1.18 statements are not prepared "
                    "(DATABASE_PREPARED_STATEMENTS=0)")
def test_the_same_statement_is_prepared_per_schema_and_answers_each_tenant_with_its_own_rows(
        make_tenant: Callable[..., Tenant]) -> None:
    a, b = make_tenant(), make_tenant()
    with tenant_tx(a.slug) as tx:
        create_user(tx, "one@scope.example", Role.MEMBER, "correct-horse-battery")
    with tenant_tx(b.slug) as tx:
        for name in ("two", "three"):
            create_user(tx, f"{name}@scope.example", Role.MEMBER, "correct-horse-battery")
    seen: list[str] = []
    for _ in range(4):  # prepared from the second run on, alternating tenants
        count_a, statements = _count(a.slug)
        seen += statements
        count_b, statements = _count(b.slug)
        seen += statements
        assert (count_a, count_b) == (1, 2)
    assert any(s.endswith(f"/*{a.schema}*/") for s in seen)
    assert any(s.endswith(f"/*{b.schema}*/") for s in seen)
    assert not any(s.rstrip().endswith("LIKE $1") for s in seen)  # none prepared unscoped


def test_generic_plans_are_transaction_local_and_only_where_asked(tenant: Tenant) -> None:
    with tenant_tx(tenant.slug, generic_plans=True) as tx:
        row = tx.conn.execute("SHOW plan_cache_mode").fetchone()
        assert row is not None and row[0] == "force_generic_plan"
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute("SHOW plan_cache_mode").fetchone()
        assert row is not None and row[0] == "auto"


def test_only_a_redoable_transaction_commits_without_waiting_for_the_flush(tenant: Tenant) -> None:
    """The relay's claim and evaluation commit without the WAL flush (synchronous_commit off
    for that transaction only): every other tenant transaction on the same pooled
    connections still waits for it."""
    with tenant_tx(tenant.slug, generic_plans=True, redoable=True) as tx:
        row = tx.conn.execute("SHOW synchronous_commit").fetchone()
        assert row is not None and row[0] == "off"
    for _ in range(4):  # whichever pooled connection comes next
        with tenant_tx(tenant.slug, generic_plans=True) as tx:
            row = tx.conn.execute("SHOW synchronous_commit").fetchone()
            assert row is not None and row[0] == "on"
