"""Worker threads starting together open one pool: the second open used to close the first
under a thread already holding one of its connections ("the pool 'tocsin' is already
closed"), stranding a delivery claimed at start-up in sending."""

from __future__ import annotations

import threading

from db.platform import pool
from db.platform.pool import close_pool, connection
from tests.integration.builders import run_concurrently


def test_threads_starting_together_share_one_pool_and_none_loses_its_connection() -> None:
    close_pool()  # as in a fresh worker process: no pool yet
    opened: list[int] = []
    holding = threading.Barrier(8)  # fewer than the pool holds (DB_POOL_MAX)

    def first_query() -> None:
        with connection() as conn:
            opened.append(id(pool._pool))
            holding.wait(timeout=30)  # every thread holds its connection while the others open
            assert conn.execute("SELECT 1").fetchone() == (1,)

    assert run_concurrently(*[first_query] * 8) == []
    assert len(set(opened)) == 1
