"""The ledger export's own budget. A download lasts as long as its reader takes to read it,
and it reads from an open transaction the whole time; so exports get a few connections of
their own, kept apart from the process pool that every page of every tenant needs, and:

- at most ``per_tenant`` exports of one tenant at once, so one tenant cannot take them all;
- no wait for a turn: an export over budget is refused at once (Busy), never queued;
- each fetch bounded by ``statement_timeout``, and the transaction by
  ``idle_in_transaction_session_timeout`` (the server ends a transaction left idle that long
  by a reader that stopped reading, whatever the web process does), both set on the
  connection itself.

The whole download's time limit is the web's to enforce (it owns the socket); see
portal.downloads.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from psycopg_pool import ConnectionPool

from db.platform.pool import check_connection
from db.platform.tenancy import TenantTx, tenant_read_tx
from domain.errors import Busy

__all__ = [
    "APPLICATION_NAME",
    "CONNECT_TIMEOUT",
    "IDLE_MARGIN_SECONDS",
    "RETRY_AFTER",
    "ExportBudget",
    "ExportSlot",
]

CONNECT_TIMEOUT = 10  # seconds to wait for an export connection (one is free for every slot)
RETRY_AFTER = 60  # seconds worth waiting before trying an export refused for its budget
# seconds beyond the download's own limit before the server ends an idle export
# transaction itself: the web process's limit fires first; this is the backstop.
IDLE_MARGIN_SECONDS = 30
APPLICATION_NAME = "tocsin-export"  # how export connections show in pg_stat_activity


class ExportSlot:
    """One running export's share of the budget: given back once, when the export ends (or
    when the slot is dropped without having been used)."""

    def __init__(self, budget: ExportBudget, tenant: str) -> None:
        self._budget: ExportBudget | None = budget
        self.tenant = tenant

    @contextmanager
    def transaction(self) -> Iterator[TenantTx]:
        """A read-only tenant transaction on one of the export connections."""
        if self._budget is None:
            raise RuntimeError("this export slot was given back already")
        with self._budget._pool().connection(timeout=CONNECT_TIMEOUT) as conn, \
                tenant_read_tx(conn, self.tenant) as tx:
            yield tx

    def release(self) -> None:
        budget, self._budget = self._budget, None
        if budget is not None:
            budget._release(self.tenant)

    def __del__(self) -> None:
        self.release()


class ExportBudget:
    def __init__(
        self, database_url: str, *, connections: int, per_tenant: int,
        statement_seconds: int, idle_seconds: int,
    ) -> None:
        self._database_url = database_url
        self._connections = connections
        self._per_tenant = per_tenant
        self._options = (
            f"-c statement_timeout={statement_seconds * 1000} "
            f"-c idle_in_transaction_session_timeout={(idle_seconds + IDLE_MARGIN_SECONDS) * 1000}"
        )
        # Re-entrant: a slot dropped unused gives itself back from __del__, which the garbage
        # collector may run while this very thread holds the lock.
        self._lock = threading.RLock()
        self._running: Counter[str] = Counter()
        self._opened: ConnectionPool | None = None

    def reserve(self, tenant: str) -> ExportSlot:
        """A slot for one more export of this tenant, or Busy (429 for the tenant's own
        share, 503 when every export connection of the process is in use)."""
        with self._lock:
            if self._running[tenant] >= self._per_tenant:
                raise Busy(
                    f"an export of this ledger is already running (at most {self._per_tenant} "
                    "at once); wait for it to finish, then try again",
                    retry_after=RETRY_AFTER, own_share=True,
                )
            if self._running.total() >= self._connections:
                raise Busy(
                    "too many ledger exports are running right now; try again in a minute",
                    retry_after=RETRY_AFTER, own_share=False,
                )
            self._running[tenant] += 1
        return ExportSlot(self, tenant)

    @property
    def running(self) -> int:
        with self._lock:
            return self._running.total()

    def _release(self, tenant: str) -> None:
        with self._lock:
            self._running[tenant] -= 1
            if self._running[tenant] <= 0:
                del self._running[tenant]

    def _pool(self) -> ConnectionPool:
        with self._lock:
            if self._opened is None:
                # Opened on the first export, not at start-up: most processes never export.
                pool = ConnectionPool(
                    self._database_url, min_size=0, max_size=self._connections,
                    kwargs={"autocommit": True, "options": self._options,
                            "application_name": APPLICATION_NAME},
                    # A connection the server ended (an idle export) is replaced, not reused.
                    check=check_connection, open=False, name="tocsin-exports",
                )
                pool.open(wait=False)
                self._opened = pool
            return self._opened

    def close(self) -> None:
        with self._lock:
            pool, self._opened = self._opened, None
        if pool is not None:
            pool.close()
