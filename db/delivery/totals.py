"""How many deliveries wait or need attention, by status and channel, summed over every
tenant: the reading behind the web's `tocsin_deliveries` metric (portal/metrics.py).

Only the statuses that stay small and mean "not done yet" or "look at this" are counted
(all but `batched` have a partial index); the settled ones (accepted, delivered, bounced,
complained, cancelled) grow with history and are left out: the provider calls and their
errors are counted as they happen by the workers' counters (tocsin/monitoring/metrics.py).
One statement reads up to TENANTS_PER_STATEMENT schemas, so a reading over thousands of
tenants is a few round trips, not one per tenant.
"""

from __future__ import annotations

from collections import Counter

import psycopg
from psycopg import sql

from db.platform.errors import DatabaseUnavailable
from db.platform.pool import connection
from db.platform.tenancy import not_migrated_is_an_error

__all__ = ["CHANNELS", "OPEN_STATUSES", "TENANTS_PER_STATEMENT", "open_deliveries"]

OPEN_STATUSES = ("pending", "deferred", "batched", "sending", "unknown", "failed")
CHANNELS = ("email", "in_app")
TENANTS_PER_STATEMENT = 200  # schemas one UNION ALL reads; bounds a statement's planning time


def _statement(schemas: list[str]) -> sql.Composed:
    parts = [
        sql.SQL("SELECT status, channel FROM {}.notification_deliveries WHERE status = ANY(%(open)s)")
        .format(sql.Identifier(schema))
        for schema in schemas
    ]
    return sql.SQL("SELECT status, channel, count(*) FROM ({}) d GROUP BY status, channel").format(
        sql.SQL(" UNION ALL ").join(parts))


def open_deliveries() -> Counter[tuple[str, str]]:
    """(status, channel) -> deliveries in that state across every tenant. Raises
    DatabaseUnavailable when PostgreSQL does not answer."""
    try:
        try:
            return _read()
        except psycopg.errors.UndefinedTable:  # a tenant was removed while we read: read again
            return _read()
    except psycopg.OperationalError as error:  # also a pool timeout
        raise DatabaseUnavailable(f"PostgreSQL did not answer: {error}") from None


def _read() -> Counter[tuple[str, str]]:
    totals: Counter[tuple[str, str]] = Counter()
    with connection() as conn:
        with not_migrated_is_an_error():
            schemas = [str(s) for (s,) in conn.execute(
                "SELECT schema_name FROM control.tenants ORDER BY id").fetchall()]
        for start in range(0, len(schemas), TENANTS_PER_STATEMENT):
            rows = conn.execute(_statement(schemas[start:start + TENANTS_PER_STATEMENT]),
                                {"open": list(OPEN_STATUSES)}).fetchall()
            for status, channel, count in rows:
                totals[(str(status), str(channel))] += int(str(count))
    return totals
