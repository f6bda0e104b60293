"""The pool's check before it hands out a connection (db.platform.pool.check_connection): a
connection whose backend ended is replaced, not handed out. (That a well one is handed out
without a round trip shows in bench/badge_anatomy.py's pool checkout.)"""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.platform.pool import check_connection
from tests.integration.conftest import wait_until
from tocsin.core.settings import load_settings


@pytest.fixture
def one_connection_pool() -> Iterator[ConnectionPool]:
    pool = ConnectionPool(load_settings().database_url, min_size=1, max_size=1,
                          kwargs={"autocommit": True}, check=check_connection, open=False)
    pool.open(wait=True, timeout=30)
    try:
        yield pool
    finally:
        pool.close()


def backend_pid(pool: ConnectionPool) -> int:
    with pool.connection() as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.skipif(bool(os.environ.get("TEST_PGBOUNCER")),  # make test-pgbouncer
                    reason="through PgBouncer the pool's connection is PgBouncer's, "
                    "not the terminated backend's")
def test_a_connection_whose_backend_was_terminated_is_replaced_before_it_is_handed_out(
    one_connection_pool: ConnectionPool,
) -> None:
    terminated = backend_pid(one_connection_pool)
    with psycopg.connect(load_settings().database_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [terminated])
        wait_until(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                         [terminated]).fetchone() == (0,), "the backend to end")
    replacement = backend_pid(one_connection_pool)  # would raise, handed the dead one
    assert replacement != terminated

