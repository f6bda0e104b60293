"""Whether PostgreSQL answers: the readiness check behind the portal's /healthz."""

from __future__ import annotations

import psycopg

from db.platform.errors import DatabaseUnavailable
from db.platform.pool import connection

__all__ = ["check_database"]


def check_database() -> None:
    """Run a trivial query; raise DatabaseUnavailable when PostgreSQL cannot answer it.
    (A pool timeout is a psycopg.OperationalError too.)"""
    try:
        with connection() as conn:
            conn.execute("SELECT 1").fetchone()
    except psycopg.Error as error:
        raise DatabaseUnavailable(f"PostgreSQL did not answer: {error}") from None
