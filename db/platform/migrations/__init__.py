"""Versioned SQL migrations: one set for the control schema, one applied to every tenant.

Each version is applied and recorded in one transaction; an advisory lock makes two
processes migrating at once (web and worker starting together) take turns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg import sql

from db.platform.pool import connection
from domain.delivery.chat import CHAT
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
    "TenantMigrationFailed",
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
    "chat_deliveries": CHAT,
    "sms_deliveries": DELIVERY,  # a text moves as an email does (tenant migration 0035)
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


# A tenant schema's migration: the run's lock shared, so that schemas migrate in parallel
# (`tocsin migrate --jobs N`) while the control schema's migration (which takes it
# exclusively) still waits for them and they for it; and the schema's own lock (the
# two-key form, a lock space of its own), so that two runs never migrate one schema at once.
_SCHEMA_LOCK = ("SELECT pg_advisory_xact_lock_shared(%s), "
                "pg_advisory_xact_lock(%s, hashtext(%s))")


class TenantMigrationFailed(Exception):
    """A tenant schema's migration failed: that schema is untouched (its transaction rolled
    back), every other one migrated or untouched."""

    def __init__(self, slug: str, schema: str, error: BaseException):
        super().__init__(f"migrating tenant {slug} (schema {schema}) failed, nothing of it "
                         f"applied: {type(error).__name__}: {error}".strip())
        self.slug = slug
        self.schema = schema


def _slug_of(schema: str) -> str:
    with connection() as conn:
        row = conn.execute("SELECT slug FROM control.tenants WHERE schema_name = %s",
                           [schema]).fetchone()
    return str(row[0]) if row else "?"


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
                on_start: Callable[[int], None] | None = None, *, jobs: int = 1) -> MigrationReport:
    """Bring the control schema and every tenant schema up to date. Idempotent, and
    resumable: each schema's migrations commit in a transaction of their own, so an
    interrupted run leaves every schema either migrated or untouched, and a rerun picks up
    the schemas still behind. ``on_start`` hears how many schemas are behind,
    ``on_schema`` each one as it commits (the CLI's progress line), from one thread at a time.

    ``jobs`` schemas are migrated at once, each on a connection of its own. When one fails,
    no further schema is started, those under way finish (each commits whole or not at all),
    and TenantMigrationFailed names the first that failed."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    applied: list[tuple[str, str]] = []
    with connection() as conn:
        with conn.transaction():
            applied += [("control", v) for v in ensure_control_schema(conn)]
        schemas = schemas_behind(conn)
    if on_start is not None:
        on_start(len(schemas))
    done = 0
    heard = threading.Lock()  # one schema's report at a time: the count and the listener
    failed: list[TenantMigrationFailed] = []
    stop = threading.Event()  # interrupted (Ctrl-C): start no other schema

    def migrate_one(schema: str) -> None:
        nonlocal done
        if failed or stop.is_set():
            return  # a schema failed, or the run was interrupted: start no other
        try:
            with connection() as own, own.transaction():
                own.execute(_SCHEMA_LOCK, [MIGRATION_LOCK, MIGRATION_LOCK, schema])
                versions = apply_tenant_migrations(own, schema)
        except Exception as error:
            with heard:
                failed.append(TenantMigrationFailed(_slug_of(schema), schema, error))
            return
        with heard:
            applied.extend((schema, v) for v in versions)
            done += 1
            if on_schema is not None:
                on_schema(SchemaMigrated(schema, tuple(versions), done, len(schemas)))

    if jobs == 1:
        for schema in schemas:
            migrate_one(schema)
            if failed:
                break
    else:
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="migrate") as pool:
            try:
                list(pool.map(migrate_one, schemas))
            except BaseException:
                stop.set()  # those under way finish (whole or not at all); no other starts
                raise
    if failed:
        raise failed[0]
    return MigrationReport(tuple(applied))


def drop_schema(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
