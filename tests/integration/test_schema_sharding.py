"""The path to Citus schema-based sharding (README "Scaling beyond one PostgreSQL"): each
tenant schema can become its own shard group only if nothing in it points outside it, and
only if a tenant transaction never reaches into another tenant's schema. Both are checked
against the real catalog and the real locks of the main use cases."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import db.evidence.export_budget
import db.platform.tenancy
from db.delivery.sweep import run_sweep
from db.notices.scan import run_scan
from db.platform.pool import connection
from db.platform.tenancy import Tenant
from tests.integration.builders import add_client, delivery_statuses
from tests.integration.conftest import RunningWorker, SesOutbox, wait_until
from tests.integration.portal_support import People, PortalClient, signed_in

# What a tenant transaction may lock besides its own schema: the control schema (reference
# tables under Citus), and PostgreSQL's own catalogs and TOAST tables.
SHARED = {"control", "pg_catalog", "pg_toast"}

_SCHEMAS_LOCKED = """
SELECT DISTINCT n.nspname
FROM pg_locks l
JOIN pg_class c ON c.oid = l.relation
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


@dataclass
class SchemasTouched:
    """For each tenant schema a transaction was scoped to, every schema whose relations it
    held a lock on just before committing (a relation lock lasts until the end of the
    transaction, so the set covers every table, index and sequence it read or wrote)."""

    by_tenant: dict[str, set[str]] = field(default_factory=dict)
    transactions: int = 0
    exports: int = 0  # of them, read-only export transactions


class _ObservedConnection:
    """The pooled connection as tenant_tx uses it, with a look at the locks held at the end
    of each successful transaction. Everything else goes to the real connection."""

    def __init__(self, conn: Any, seen: SchemasTouched) -> None:
        self._conn, self._seen = conn, seen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def _observe(self) -> None:
        path = self._conn.execute("SELECT current_setting('search_path')").fetchone()[0]
        scoped = str(path).split(",")[0].strip()
        if scoped.startswith("t_"):
            locked = {str(r[0]) for r in self._conn.execute(_SCHEMAS_LOCKED).fetchall()}
            self._seen.by_tenant.setdefault(scoped, set()).update(locked)
            self._seen.transactions += 1

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        # tenant_tx sends its own BEGIN (with the tenant lookup) and COMMIT: look just before
        # the COMMIT, while the transaction's locks are still held.
        if isinstance(query, str) and query.strip().upper() == "COMMIT":
            self._observe()
        return self._conn.execute(query, *args, **kwargs)

    @contextmanager
    def transaction(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with self._conn.transaction(*args, **kwargs) as tx:
            yield tx
            self._observe()


@pytest.fixture
def schemas_touched(monkeypatch: pytest.MonkeyPatch) -> SchemasTouched:
    seen = SchemasTouched()
    real = db.platform.tenancy.connection

    @contextmanager
    def observed() -> Iterator[Any]:
        with real() as conn:
            yield _ObservedConnection(conn, seen)

    monkeypatch.setattr(db.platform.tenancy, "connection", observed)
    # The ledger export reads on a connection of its own (db/evidence/export_budget.py).
    real_read_tx = db.evidence.export_budget.tenant_read_tx

    def observed_read_tx(conn: Any, slug: str) -> Any:
        seen.exports += 1
        return real_read_tx(_ObservedConnection(conn, seen), slug)

    monkeypatch.setattr(db.evidence.export_budget, "tenant_read_tx", observed_read_tx)
    return seen


def test_no_tenant_table_has_a_foreign_key_outside_its_schema(tenant: Tenant) -> None:
    with connection() as conn:
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s", [tenant.schema]).fetchone()
        outside = conn.execute(
            """
            SELECT con.conname, src.relname, dst_ns.nspname, dst.relname
            FROM pg_constraint con
            JOIN pg_class src ON src.oid = con.conrelid
            JOIN pg_namespace src_ns ON src_ns.oid = src.relnamespace
            JOIN pg_class dst ON dst.oid = con.confrelid
            JOIN pg_namespace dst_ns ON dst_ns.oid = dst.relnamespace
            WHERE con.contype = 'f' AND src_ns.nspname = %s AND dst_ns.nspname <> %s
            """, [tenant.schema, tenant.schema]).fetchall()
        inward = conn.execute(
            """
            SELECT con.conname, src_ns.nspname, src.relname
            FROM pg_constraint con
            JOIN pg_class src ON src.oid = con.conrelid
            JOIN pg_namespace src_ns ON src_ns.oid = src.relnamespace
            JOIN pg_class dst ON dst.oid = con.confrelid
            JOIN pg_namespace dst_ns ON dst_ns.oid = dst.relnamespace
            WHERE con.contype = 'f' AND dst_ns.nspname = %s AND src_ns.nspname <> %s
            """, [tenant.schema, tenant.schema]).fetchall()
        internal = conn.execute(
            "SELECT count(*) FROM pg_constraint con JOIN pg_class src ON src.oid = con.conrelid "
            "JOIN pg_namespace ns ON ns.oid = src.relnamespace "
            "WHERE con.contype = 'f' AND ns.nspname = %s", [tenant.schema]).fetchone()
    assert tables is not None and int(tables[0]) > 10  # the schema is really migrated
    assert internal is not None and int(internal[0]) > 0  # the check sees foreign keys at all
    assert outside == [], "tenant tables referencing another schema"
    assert inward == [], "tables elsewhere referencing this tenant's tables"


def test_scan_deliver_sweep_and_portal_reads_touch_only_their_schema_and_control(
    people: People, worker: RunningWorker, ses: SesOutbox, portal: PortalClient,
    make_tenant: Any, schemas_touched: SchemasTouched,
) -> None:
    tenant = people.tenant
    neighbour: Tenant = make_tenant()  # a second tenant with work of its own, side by side
    as_of = datetime.now(UTC)
    add_client(neighbour, as_of.date() + timedelta(days=7), name="Next Door Ltd", users=1)

    for t in (tenant, neighbour):
        run_scan(t.slug, as_of)  # claims, prepares and hands the emails to the worker
    wait_until(lambda: delivery_statuses(neighbour).get("accepted", 0) >= 1
               and delivery_statuses(tenant).get("accepted", 0) >= 1, "the emails to be sent")
    worker.drain()
    for t in (tenant, neighbour):
        run_sweep(t.slug)
    signed_in(portal, people, people.admin)
    for path in ("/", "/inbox/badge", "/ledger", "/ledger/attention", "/clients",
                 f"/clients/{people.client.id}", "/members", "/preferences", "/ledger.csv"):
        response = portal.get(path)
        assert response.status_code == 200, (path, response.status_code)

    seen = schemas_touched.by_tenant
    assert set(seen) == {tenant.schema, neighbour.schema}
    assert schemas_touched.transactions >= 10  # the use cases above really ran through here
    assert schemas_touched.exports == 1  # the CSV export's own connection was seen too
    for schema, locked in seen.items():
        assert schema in locked
        assert locked <= {schema} | SHARED, (schema, locked - {schema} - SHARED)
    assert "control" in seen[tenant.schema]  # the check sees shared tables when they are used
