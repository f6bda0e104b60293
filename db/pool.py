"""The process-wide connection pool, opened on first use from the settings."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg_pool import ConnectionPool

from db.errors import DatabaseUnavailable

_lock = threading.Lock()
_pool: ConnectionPool | None = None


def open_pool(database_url: str, *, max_size: int = 10, min_size: int = 1) -> ConnectionPool:
    """Open (or replace) the process pool. Connections run in autocommit mode so that a
    `conn.transaction()` block is the only transaction boundary anywhere in Tocsin."""
    global _pool
    with _lock:
        if _pool is not None:
            _pool.close()
        _pool = ConnectionPool(
            database_url,
            min_size=min(min_size, max_size),
            max_size=max_size,
            kwargs={"autocommit": True},
            open=False,
            name="tocsin",
        )
        try:
            _pool.open(wait=True, timeout=30)
        except Exception as error:
            _pool = None
            raise DatabaseUnavailable(f"cannot reach PostgreSQL: {error}") from None
        return _pool


def get_pool() -> ConnectionPool:
    if _pool is None:
        from tocsin.config import load_settings

        settings = load_settings()
        return open_pool(settings.database_url, max_size=settings.db_pool_max)
    return _pool


def close_pool() -> None:
    global _pool
    with _lock:
        if _pool is not None:
            _pool.close()
            _pool = None


@contextmanager
def connection() -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with get_pool().connection() as conn:
        yield conn
