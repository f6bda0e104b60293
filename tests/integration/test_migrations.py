"""Versioned migrations: a second run is a no-op, and a tenant is created whole or not at all."""

from __future__ import annotations

import uuid

import pytest
from psycopg import errors, sql

from db.platform.migrations import TENANT, migrate_all
from db.platform.pool import connection
from db.platform.tenancy import Tenant, create_tenant, list_tenants


def test_migrating_twice_applies_nothing_the_second_time(tenant: Tenant) -> None:
    migrate_all()
    assert migrate_all().applied == ()


def test_every_tenant_schema_records_every_tenant_migration(tenant: Tenant) -> None:
    with connection() as conn:
        rows = conn.execute(
            "SELECT version FROM control.schema_migrations WHERE schema_name = %s ORDER BY 1",
            [tenant.schema]).fetchall()
    assert [r[0] for r in rows] == [m.version for m in TENANT]


def test_a_tenant_whose_schema_cannot_be_created_leaves_nothing_behind() -> None:
    slug = f"t{uuid.uuid4().hex[:10]}"
    schema = f"t_{slug}"
    with connection() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        with pytest.raises(errors.DuplicateSchema):
            create_tenant(slug, "Half Made", "UTC")
        assert slug not in {t.slug for t in list_tenants()}
        with connection() as conn:
            recorded = conn.execute(
                "SELECT count(*) FROM control.schema_migrations WHERE schema_name = %s", [schema]
            ).fetchone()
        assert recorded == (0,)
    finally:
        with connection() as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
