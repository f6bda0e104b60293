"""Versioned SQL migrations: one set for the control schema, one applied to every tenant.

Each version is applied and recorded in one transaction; an advisory lock makes two
processes migrating at once (web and worker starting together) take turns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg import sql

from db.platform.pool import connection
from domain.delivery.states import DELIVERY
from domain.delivery.webhooks import WEBHOOK
from domain.events.states import EVENT
from domain.notices.claims import CLAIM
from domain.notices.licence import LICENCE
from domain.state_machine import StateMachine

__all__ = [
    "CONTROL",
    "MIGRATION_LOCK",
    "STATUS_MACHINES",
    "TENANT",
    "Migration",
    "MigrationReport",
    "ProgressListener",
    "SchemaMigrated",
    "apply_tenant_migrations",
    "drop_schema",
    "ensure_control_schema",
    "migrate_all",
    "schemas_behind",
    "sync_state_moves",
]

MIGRATION_LOCK = 7_160_001  # advisory lock key held while migrating

# Each tenant table's status column and the domain machine its trigger (tenant migration
# 0017) checks every change against, by the machine's name.
STATUS_MACHINES: dict[str, StateMachine] = {
    "notification_deliveries": DELIVERY,
    "notification_ledger": CLAIM,
    "events": EVENT,
    "clients": LICENCE,
    "webhook_deliveries": WEBHOOK,
}


@dataclass(frozen=True)
class Migration:
    version: str
    sql: str


def _load(kind: str) -> tuple[Migration, ...]:
    folder = resources.files(__package__).joinpath(kind)
    files = sorted(
        (f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name
    )
    return tuple(Migration(f.name.removesuffix(".sql"), f.read_text()) for f in files)


CONTROL = _load("control")
TENANT = _load("tenant")

_BOOTSTRAP = """
CREATE SCHEMA IF NOT EXISTS control;
CREATE TABLE IF NOT EXISTS control.schema_migrations (
    schema_name text NOT NULL,
    version     text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schema_name, version)
);
"""


@dataclass(frozen=True)
class MigrationReport:
    applied: tuple[tuple[str, str], ...]  # (schema, version) pairs applied by this run


def _applied(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> set[str]:
    rows = conn.execute(
        "SELECT version FROM control.schema_migrations WHERE schema_name = %s", [schema]
    ).fetchall()
    return {str(r[0]) for r in rows}


def apply_tenant_migrations(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> list[str]:
    """Apply pending tenant migrations to one schema, inside the caller's transaction."""
    done = _applied(conn, schema)
    applied = []
    for migration in TENANT:
        if migration.version in done:
            continue
        conn.execute("SELECT set_config('search_path', %s, true)", [f"{schema}, public"])
        conn.execute(migration.sql.encode())
        conn.execute(
            "INSERT INTO control.schema_migrations (schema_name, version) VALUES (%s, %s)",
            [schema, migration.version],
        )
        applied.append(migration.version)
    return applied


def _lock(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(%s)", [MIGRATION_LOCK])


def ensure_control_schema(conn: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    """Bootstrap and migrate the control schema inside the caller's transaction."""
    _lock(conn)
    conn.execute(_BOOTSTRAP.encode())
    done = _applied(conn, "control")
    applied = []
    for migration in CONTROL:
        if migration.version not in done:
            conn.execute(migration.sql.encode())
            conn.execute(
                "INSERT INTO control.schema_migrations (schema_name, version) VALUES ('control', %s)",
                [migration.version],
            )
            applied.append(migration.version)
    sync_state_moves(conn)
    return applied


def sync_state_moves(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Write the moves of the domain's status machines into control.state_moves, which the
    tenant triggers check every status change against. Only when they differ, so that a
    steady state costs one read."""
    wanted = {(m.name, a, b) for m in STATUS_MACHINES.values() for a, b in m.moves}
    rows = conn.execute("SELECT machine, from_status, to_status FROM control.state_moves").fetchall()
    if {(str(r[0]), str(r[1]), str(r[2])) for r in rows} == wanted:
        return
    conn.execute("DELETE FROM control.state_moves")
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO control.state_moves (machine, from_status, to_status) VALUES (%s, %s, %s)",
            sorted(wanted),
        )


@dataclass(frozen=True)
class SchemaMigrated:
    """One tenant schema brought up to date (and committed) by ``migrate_all``."""

    schema: str
    applied: tuple[str, ...]  # versions this run applied to it
    done: int  # schemas finished so far by this run, this one included
    total: int  # schemas this run found behind


ProgressListener = Callable[[SchemaMigrated], None]


def schemas_behind(conn: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    """Tenant schemas missing at least one tenant migration, in creation order, in one
    query: a rerun over thousands of schemas that are already up to date costs one round
    trip, not one transaction per schema."""
    rows = conn.execute(
        "SELECT t.schema_name FROM control.tenants t "
        "WHERE (SELECT count(*) FROM control.schema_migrations m "
        "       WHERE m.schema_name = t.schema_name AND m.version = ANY(%s)) < %s "
        "ORDER BY t.id",
        [[m.version for m in TENANT], len(TENANT)],
    ).fetchall()
    return [str(r[0]) for r in rows]


def migrate_all(on_schema: ProgressListener | None = None,
                on_start: Callable[[int], None] | None = None) -> MigrationReport:
    """Bring the control schema and every tenant schema up to date. Idempotent, and
    resumable: each schema's migrations commit in a transaction of their own, so an
    interrupted run leaves every schema either migrated or untouched, and a rerun picks up
    the schemas still behind. ``on_start`` hears how many schemas are behind,
    ``on_schema`` each one as it commits (the CLI's progress line)."""
    applied: list[tuple[str, str]] = []
    with connection() as conn:
        with conn.transaction():
            applied += [("control", v) for v in ensure_control_schema(conn)]
        schemas = schemas_behind(conn)
        if on_start is not None:
            on_start(len(schemas))
        for done, schema in enumerate(schemas, start=1):
            with conn.transaction():
                # Taken per schema, not for the whole run: a tenant being created (which
                # takes the same lock) waits for one schema, not for thousands.
                _lock(conn)
                versions = apply_tenant_migrations(conn, schema)
            applied += [(schema, v) for v in versions]
            if on_schema is not None:
                on_schema(SchemaMigrated(schema, tuple(versions), done, len(schemas)))
    return MigrationReport(tuple(applied))


def drop_schema(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
