"""A pooled connection that has worked in DB_CONNECTION_MAX_SCHEMAS tenant schemas is retired
when it goes back to the pool, so no backend keeps the catalog entries of every tenant."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from db.platform.pool import connection, schemas_touched, set_statement_scope
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.conftest import use_settings, wait_until

# Through PgBouncer the pool's connections are PgBouncer's: the backends behind them are its
# server connections, which PgBouncer retires (server_lifetime), not the pool.
pytestmark = pytest.mark.skipif(bool(os.environ.get("TEST_PGBOUNCER")),
                                reason="through PgBouncer a pooled connection is not a backend")


def backend_alive(pid: int) -> bool:
    with connection() as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    assert row is not None
    return int(str(row[0])) == 1


def test_a_connection_is_replaced_once_it_has_worked_in_the_limit_of_tenant_schemas(
        make_tenant: Callable[..., Tenant]) -> None:
    use_settings(db_connection_max_schemas=3)
    tenants = [make_tenant() for _ in range(3)]
    for t in tenants[:2]:
        with tenant_tx(t.slug):  # below the limit: whichever connection served stays
            pass
    with connection() as conn:
        pid = conn.info.backend_pid
        for t in tenants:
            set_statement_scope(conn, t.schema)
        set_statement_scope(conn, None)
        assert schemas_touched(conn) >= 3
    wait_until(lambda: not backend_alive(pid), "the retired connection's backend to end")
    with connection() as conn:  # the pool still serves, from a new connection
        assert conn.info.backend_pid != pid
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_with_no_limit_a_connection_is_kept_however_many_schemas_it_worked_in(
        make_tenant: Callable[..., Tenant]) -> None:
    use_settings(db_connection_max_schemas=0)
    tenants = [make_tenant() for _ in range(3)]
    with connection() as conn:
        pid = conn.info.backend_pid
        for t in tenants:
            set_statement_scope(conn, t.schema)
        set_statement_scope(conn, None)
    assert backend_alive(pid)
