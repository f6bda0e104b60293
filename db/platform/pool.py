"""The process-wide connection pool, configured at start-up from the settings and opened
on first use."""

from __future__ import annotations

import json
import select
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import msgspec
import psycopg
from psycopg._queries import PostgresQuery
from psycopg.abc import Params, Query
from psycopg.types.json import set_json_loads
from psycopg_pool import ConnectionPool

from db.platform.errors import DatabaseUnavailable

__all__ = [
    "CONNECT_TIMEOUT",
    "PREPARED_PER_CONNECTION",
    "PREPARE_AFTER",
    "SCHEMAS_PER_CONNECTION",
    "ScopedCursor",
    "T",
    "check_connection",
    "close_pool",
    "configure_pool",
    "connection",
    "get_pool",
    "json_loads",
    "open_pool",
    "retrying",
    "schemas_touched",
    "set_statement_scope",
]

T = TypeVar("T")

CONNECT_TIMEOUT = 10  # seconds to wait for PostgreSQL to accept a connection
_lock = threading.Lock()
_pool: ConnectionPool | None = None
_configured: tuple[str, int] | None = None  # (database_url, max_size) handed in at start-up
# Off behind a pooler that cannot keep a prepared statement from one transaction to the next
# (PgBouncer before 1.21 in transaction mode: DATABASE_PREPARED_STATEMENTS=0).
_prepare = True


_decode = msgspec.json.Decoder()


def json_loads(data: bytes | str) -> object:
    """json and jsonb values as Python, decoded in C (a batch's evaluation reads hundreds
    of fact values; json.loads took a tenth of it). The few documents msgspec refuses
    (a number beyond a double's range, which jsonb's numeric allows) fall back to the
    standard library, so every value reads as it did before."""
    try:
        return _decode.decode(data)
    except msgspec.DecodeError:
        return json.loads(data)


set_json_loads(json_loads)  # every connection of the process, pooled or not


# Prepared statements, per pooled connection. psycopg keys a prepared statement by its text,
# and PostgreSQL plans a statement again whenever search_path differs from the one it was
# planned under, which a tenant transaction changes every time: the same text prepared once
# and run for fifty tenants was re-planned on every switch. So in a tenant transaction each
# statement's text carries its schema (a trailing comment, see ScopedCursor): one prepared
# statement per (statement, schema) and connection, planned once. PREPARED_PER_CONNECTION
# bounds how many a connection keeps (psycopg deallocates the least recently used).
PREPARED_PER_CONNECTION = 2000
PREPARE_AFTER = 1  # executions of a text before it is prepared (psycopg's default is 5)
_scopes: weakref.WeakKeyDictionary[psycopg.Connection[Any], bytes] = weakref.WeakKeyDictionary()

# Backend memory bound (issue 30): a backend keeps the catalog entries of every relation it
# has touched, and the plans of its prepared statements, per schema (120-380 kB a tenant,
# docs/benchmarks/tenants.md), for as long as it lives: a pooled connection that reached
# every one of 10,000 tenants would hold gigabytes. A connection that has worked in this many
# tenant schemas is retired when it goes back to the pool (a new one replaces it), so no
# backend holds more than about this many schemas' worth. 0: never retired.
SCHEMAS_PER_CONNECTION = 500
_schemas_per_connection = SCHEMAS_PER_CONNECTION
_touched: weakref.WeakKeyDictionary[psycopg.Connection[Any], set[str]] = weakref.WeakKeyDictionary()


def set_statement_scope(conn: psycopg.Connection[Any], schema: str | None, *,
                        prepared: bool = True) -> None:
    """Tag the statements ``conn`` runs from now on with ``schema`` (None: untagged). Set by
    db/platform/tenancy.py for the length of a tenant transaction; the schema name is a validated
    identifier (domain/people/identity.py schema_for), so it cannot end the comment.

    ``prepared=False``: the statements are not prepared at all (sent unnamed, planned once
    each), for a transaction that reaches its schema once per tick (a scan, a sweep, a
    digest build): a plan kept per schema would be evicted, or its connection retired,
    before its next use, and preparing costs a round trip and backend memory of its own."""
    if schema is None:
        _scopes.pop(conn, None)
        conn.prepare_threshold = PREPARE_AFTER if _prepare else None
        return
    _touched.setdefault(conn, set()).add(schema)
    if prepared:
        _scopes[conn] = f"\n/*{schema}*/".encode()
    else:
        _scopes.pop(conn, None)
        conn.prepare_threshold = None


def schemas_touched(conn: psycopg.Connection[Any]) -> int:
    """How many tenant schemas ``conn`` has worked in since it was opened."""
    return len(_touched.get(conn, ()))


class ScopedCursor(psycopg.Cursor[Any]):
    """The pool's cursors: a statement run inside a tenant transaction ends with a comment
    naming the tenant's schema, so its prepared statement is that schema's alone."""

    def _convert_query(self, query: Query, params: Params | None = None) -> PostgresQuery:
        pgq = super()._convert_query(query, params)
        scope = _scopes.get(self._conn)
        if scope is not None:
            pgq.query += scope
        return pgq


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.cursor_factory = ScopedCursor
    conn.prepare_threshold = PREPARE_AFTER if _prepare else None
    conn.prepared_max = PREPARED_PER_CONNECTION


def check_connection(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """The pool's check before it hands out a connection, without a round trip when the
    connection is plainly well: an idle connection has nothing to read, while one whose
    backend ended (terminated, the server restarted, an idle timeout) has the server's
    goodbye or the end of the stream waiting on its socket. Only then is it asked, and the
    error that raises makes the pool replace it. psycopg_pool's own check asks every time: a
    round trip for every transaction, a tenth of what a badge request waited on."""
    if conn.closed:
        raise psycopg.OperationalError("the connection is closed")
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        ConnectionPool.check_connection(conn)


def configure_pool(database_url: str, *, max_size: int = 10, prepared: bool = True,
                   schemas_per_connection: int = SCHEMAS_PER_CONNECTION) -> None:
    """Where the pool connects, from the settings read at process start. The pool opens on
    first use; a different database closes the pool opened for the previous one.
    ``prepared``: whether its connections prepare statements (PREPARE_AFTER);
    ``schemas_per_connection``: tenant schemas after which a connection is retired (0: never)."""
    global _configured, _pool, _prepare, _schemas_per_connection
    _schemas_per_connection = schemas_per_connection
    with _lock:
        if _configured == (database_url, max_size) and _prepare == prepared:
            return
        _prepare = prepared
        _configured = (database_url, max_size)
        if _pool is not None:
            _pool.close()
            _pool = None


def open_pool(database_url: str, *, max_size: int = 10, min_size: int = 1) -> ConnectionPool:
    """Open (or replace) the process pool. Connections run in autocommit mode so that a
    `conn.transaction()` block (or db/platform/tenancy.py tenant_tx, whose BEGIN travels with its
    first statement) is the only transaction boundary anywhere in Tocsin."""
    with _lock:
        return _open_locked(database_url, max_size=max_size, min_size=min_size)


def _open_locked(database_url: str, *, max_size: int, min_size: int = 1) -> ConnectionPool:
    global _pool
    if _pool is not None:
        _pool.close()
    _pool = None
    _probe(database_url)
    pool = ConnectionPool(
        database_url,
        min_size=min(min_size, max_size),
        max_size=max_size,
        kwargs={"autocommit": True},
        configure=_configure,
        # A connection whose backend was terminated is replaced, not handed out.
        check=check_connection,
        open=False,
        name="tocsin",
    )
    try:
        pool.open(wait=True, timeout=30)
    except Exception as error:
        raise DatabaseUnavailable(f"cannot reach PostgreSQL: {error}") from None
    _pool = pool
    return pool


def _probe(database_url: str) -> None:
    """Fail fast, in one line, when the server is unreachable, instead of letting the pool
    retry in the background for its whole timeout."""
    try:
        psycopg.connect(database_url, connect_timeout=CONNECT_TIMEOUT).close()
    except psycopg.OperationalError as error:
        reason = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        raise DatabaseUnavailable(f"cannot reach PostgreSQL: {reason}") from None


def get_pool() -> ConnectionPool:
    pool = _pool
    if pool is not None:
        return pool
    # Checked again under the lock: worker threads starting together all find no pool, and
    # a second open used to close the first under a thread already holding its connection
    # ("the pool 'tocsin' is already closed", a delivery stranded in sending).
    if _configured is None:
        raise RuntimeError("no connection pool configured: a process opens the database through "
                           "its bootstrap (tocsin.boot.start), never from db/")
    with _lock:
        if _pool is not None:
            return _pool
        assert _configured is not None
        return _open_locked(_configured[0], max_size=_configured[1])


def close_pool() -> None:
    global _pool
    with _lock:
        if _pool is not None:
            _pool.close()
            _pool = None


def retrying(write: Callable[[], T], attempts: int = 3, patience: float = 0.0) -> T:
    """Run a self-contained transaction again when its connection broke (a restarted
    server, a terminated backend). Only for writes whose outcome must not be lost, such as
    a provider's answer; each run is one whole transaction, so a retry never half-applies.
    ``patience``: keep trying for this many seconds (at least ``attempts`` times), for a
    write worth waiting out a restart of PostgreSQL for."""
    deadline = time.monotonic() + patience
    attempt = 0
    while True:
        attempt += 1
        try:
            return write()
        except psycopg.OperationalError:
            if attempt >= attempts and time.monotonic() >= deadline:
                raise
            time.sleep(min(0.2 * attempt, 2.0))


@contextmanager
def connection() -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with get_pool().connection() as conn:
        try:
            yield conn
        finally:
            if 0 < _schemas_per_connection <= schemas_touched(conn):
                _retire(conn)


def _retire(conn: psycopg.Connection[Any]) -> None:
    """Make the pool close ``conn`` when it comes back, and open another in its place: marked
    as past its lifetime (psycopg_pool's own max_lifetime path, logged at info level), so that
    no transaction is cut short and the pool stays at its size."""
    if hasattr(conn, "_expire_at"):
        conn._expire_at = 0.0
    else:  # another psycopg_pool: closing it has the same effect, with a warning in its log
        conn.close()
