"""Many tenants at once, for the tests and the bench about thousands of schemas: tenant
rows and empty schemas made in bulk, which `tocsin migrate` (the same migrations every
tenant gets) then brings up to date, as it would schemas behind a new release."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from domain.people.identity import schema_for

Connection = psycopg.Connection[tuple[Any, ...]]


def add_unmigrated_tenants(conn: Connection, prefix: str, count: int, *,
                           status: str = "active", zone: str = "UTC") -> list[str]:
    """``count`` tenants ``<prefix>0001``... with empty schemas, in creation order; returns
    their schema names. One transaction: the caller gets all of them or none."""
    width = max(4, len(str(count)))
    slugs = [f"{prefix}{n:0{width}d}" for n in range(1, count + 1)]
    schemas = [schema_for(slug) for slug in slugs]
    with conn.transaction():
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO control.tenants (slug, name, schema_name, time_zone, status) "
                "VALUES (%s, %s, %s, %s, %s)",
                [(slug, f"Tenant {slug}", schema, zone, status)
                 for slug, schema in zip(slugs, schemas, strict=True)],
            )
        conn.execute(sql.SQL(" ").join(
            sql.SQL("CREATE SCHEMA {};").format(sql.Identifier(s)) for s in schemas))
    return schemas


def remove_tenants_like(conn: Connection, prefix: str) -> int:
    """Drop the tenants whose slug starts with ``prefix``: schemas, migration records,
    run records, rows. One transaction per tenant keeps the lock table small."""
    rows = conn.execute(
        "SELECT id, schema_name FROM control.tenants WHERE starts_with(slug, %s) ORDER BY id",
        [prefix]).fetchall()
    for tenant_id, schema in rows:
        with conn.transaction():
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(str(schema))))
            conn.execute("DELETE FROM control.schema_migrations WHERE schema_name = %s", [schema])
            conn.execute("DELETE FROM control.completed_runs WHERE tenant_id = %s", [tenant_id])
            conn.execute("DELETE FROM control.tenants WHERE id = %s", [tenant_id])
    return len(rows)
