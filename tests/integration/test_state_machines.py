"""PostgreSQL enforces the domain's status machines on the four status columns: each table's
trigger checks every change against control.state_moves, written from the machines by every
migration run, so a hand-written UPDATE that slips past its guard is refused and writes
nothing. (test_delivery_moves.py goes through the delivery machine move by move.)"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from db.platform.migrations import STATUS_MACHINES
from db.platform.pool import connection
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import add_client
from tests.integration.intake_support import case_event, fraud_desk
from tocsin.core import runtime
from tocsin.core.clock import utcnow
from tocsin.shell.outbox import record_event


def _client(tenant: Tenant) -> int:
    client, _ = add_client(tenant, utcnow().date() + timedelta(days=200))
    return client.id


def _claim(tenant: Tenant) -> int:
    client_id = _client(tenant)
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on, local_date) "
            "VALUES ('licence', 'client', %s, 'd30', current_date, current_date) RETURNING id",
            [client_id]).fetchone()
    assert row is not None
    return int(str(row[0]))


def _event(tenant: Tenant) -> int:
    fraud_desk(tenant)
    with psycopg.connect(runtime.settings().database_url) as conn:
        return record_event(conn, tenant.slug, case_event("C-1", fields={"amount": 5}))


def _delivery(tenant: Tenant) -> int:
    from actors.scan import run_scan

    add_client(tenant, utcnow().date() + timedelta(days=7))
    run_scan(tenant.slug, utcnow())
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute("SELECT min(id) FROM notification_deliveries").fetchone()
    assert row is not None and row[0] is not None
    return int(str(row[0]))


# (table, a row's maker, a status to put it in, a move its machine forbids from there)
FORBIDDEN = [
    ("clients", _client, "active", "closed"),  # closed only after the grace days
    ("clients", _client, "closed", "expired"),
    ("notification_ledger", _claim, "cancelled", "claimed"),  # a cancelled notice never comes back
    ("notification_ledger", _claim, "skipped", "cancelled"),
    ("events", _event, "evaluated", "processing"),  # evaluated once
    ("events", _event, "failed", "pending"),
    ("notification_deliveries", _delivery, "accepted", "pending"),  # never sent twice
]


def _put(tenant: Tenant, table: str, row_id: int, status: str) -> None:
    """Put a row in ``status`` as a seed would, with the triggers off for this write only."""
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("SET LOCAL session_replication_role = replica")
        tx.conn.execute(f"UPDATE {table} SET status = %s WHERE id = %s", [status, row_id])


def _status(tenant: Tenant, table: str, row_id: int) -> str:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(f"SELECT status FROM {table} WHERE id = %s", [row_id]).fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize(("table", "make", "source", "target"), FORBIDDEN,
                         ids=[f"{t}:{s}->{d}" for t, _, s, d in FORBIDDEN])
def test_a_move_its_machine_forbids_is_refused_by_the_database_on_each_status_table(
    tenant: Tenant, table: str, make: object, source: str, target: str
) -> None:
    machine = STATUS_MACHINES[table]
    assert (source, target) not in machine.moves
    assert callable(make)
    row_id = make(tenant)
    _put(tenant, table, row_id, source)
    with pytest.raises(psycopg.errors.CheckViolation,
                       match=f"{machine.name} {row_id} cannot move from {source} to {target}"), \
            tenant_tx(tenant.slug) as tx:
        tx.conn.execute(f"UPDATE {table} SET status = %s WHERE id = %s", [target, row_id])
    assert _status(tenant, table, row_id) == source  # nothing written


@pytest.mark.parametrize(("table", "make", "source", "target"), [
    ("clients", _client, "expired", "closed"),
    ("notification_ledger", _claim, "claimed", "cancelled"),
    ("events", _event, "processing", "evaluated"),
])
def test_a_move_its_machine_allows_goes_through(
    tenant: Tenant, table: str, make: object, source: str, target: str
) -> None:
    assert ((source, target) in STATUS_MACHINES[table].moves)
    assert callable(make)
    row_id = make(tenant)
    _put(tenant, table, row_id, source)
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute(f"UPDATE {table} SET status = %s WHERE id = %s", [target, row_id])
    assert _status(tenant, table, row_id) == target


def test_the_database_knows_exactly_the_moves_of_every_machine() -> None:
    with connection() as conn:
        rows = conn.execute("SELECT machine, from_status, to_status FROM control.state_moves").fetchall()
    assert {(str(m), str(a), str(b)) for m, a, b in rows} == {
        (machine.name, a, b) for machine in STATUS_MACHINES.values() for a, b in machine.moves}


def test_each_status_table_of_a_tenant_schema_checks_its_own_machine(tenant: Tenant) -> None:
    with connection() as conn:
        rows = conn.execute(
            "SELECT c.relname, p.proname, encode(t.tgargs, 'escape') FROM pg_trigger t "
            "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_proc p ON p.oid = t.tgfoid WHERE n.nspname = %s AND NOT t.tgisinternal",
            [tenant.schema]).fetchall()
    guarded = {str(table): str(args).removesuffix("\\000") for table, function, args in rows
               if function == "guard_state_move"}
    assert guarded == {table: machine.name for table, machine in STATUS_MACHINES.items()}
