"""`tocsin migrate` over many tenant schemas: interrupted half way (SIGINT to the real
command), it leaves every schema either whole or untouched, and a rerun finishes the rest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from psycopg import sql

from db.platform.migrations import TENANT
from db.platform.pool import connection
from tests.integration.conftest import wait_until
from tests.support.many_tenants import add_unmigrated_tenants, remove_tenants_like

SCHEMAS = 40
BLOCKED_AT = 21  # the run is held on this schema (creation order) when it is interrupted
# Reaching the held schema means migrating the twenty before it: on a loaded CI machine that
# took longer than the usual wait (seen: over 60 s for a hundred), so this wait only bounds a hang.
REACH_LIMIT = 600.0


@pytest.fixture
def unmigrated() -> Iterator[list[str]]:
    prefix = f"mig{uuid.uuid4().hex[:6]}-"
    with connection() as conn:
        schemas = add_unmigrated_tenants(conn, prefix, SCHEMAS)
    yield schemas
    with connection() as conn:
        remove_tenants_like(conn, prefix)


def versions_recorded(schemas: list[str]) -> dict[str, int]:
    with connection() as conn:
        rows = conn.execute(
            "SELECT schema_name, count(*) FROM control.schema_migrations "
            "WHERE schema_name = ANY(%s) GROUP BY 1", [schemas]).fetchall()
    return {str(r[0]): int(str(r[1])) for r in rows}


def tables_in(schema: str) -> int:
    with connection() as conn:
        row = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s", [schema]).fetchone()
    assert row is not None
    return int(str(row[0]))


def migrate_waiting_on_a_lock() -> bool:
    with connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database() AND query LIKE '%%CREATE TABLE clients%%'").fetchone()
    assert row is not None
    return int(str(row[0])) > 0


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_an_interrupted_migrate_keeps_whole_schemas_and_a_rerun_finishes_the_rest(
        unmigrated: list[str]) -> None:
    tocsin = os.path.join(os.path.dirname(sys.executable), "tocsin")
    blocked = unmigrated[BLOCKED_AT - 1]
    # Hold the run on one schema deterministically: an uncommitted table of the same name
    # makes the migration's CREATE TABLE wait for this transaction.
    with connection() as blocker:
        blocker.execute("BEGIN")
        blocker.execute(sql.SQL("CREATE TABLE {}.clients (id int)").format(sql.Identifier(blocked)))
        # SIGINT at its default in the child, as a terminal's Ctrl-C finds it: a suite
        # started in the background of a script inherits SIGINT ignored, and Python then
        # keeps ignoring it (seen: this test hung when CI was launched with `… &`).
        run = subprocess.Popen([tocsin, "migrate"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
        try:
            wait_until(migrate_waiting_on_a_lock, "the migrate to reach the held schema",
                       limit=REACH_LIMIT)
            run.send_signal(signal.SIGINT)
            out, err = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()  # closes the pipes too
        blocker.execute("ROLLBACK")

    assert run.returncode == 130, (out, err)
    assert f"migrating tenant schemas {BLOCKED_AT - 1:,}/{SCHEMAS:,}" in err, err
    assert f"interrupted after {BLOCKED_AT - 1:,} of {SCHEMAS:,} tenant schemas" in err, err
    recorded = versions_recorded(unmigrated)
    # Whole or untouched: the first twenty have every version, the rest none, and the
    # schema that was being migrated when the signal came has no table left behind.
    assert recorded == {s: len(TENANT) for s in unmigrated[:BLOCKED_AT - 1]}
    assert tables_in(blocked) == 0

    rerun = subprocess.run([tocsin, "migrate"], capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, (rerun.stdout, rerun.stderr)
    assert f"migrated {SCHEMAS - BLOCKED_AT + 1:,} tenant schema(s)" in rerun.stdout
    assert versions_recorded(unmigrated) == {s: len(TENANT) for s in unmigrated}
    assert tables_in(blocked) == tables_in(unmigrated[0]) > 0

    again = subprocess.run([tocsin, "migrate"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "up to date" in again.stdout, (again.stdout, again.stderr)


PARALLEL_SCHEMAS = 24
FAILING_AT = 10  # this schema (creation order) cannot be migrated until its blocker goes


@pytest.fixture
def few_unmigrated() -> Iterator[list[str]]:
    prefix = f"par{uuid.uuid4().hex[:6]}-"
    with connection() as conn:
        schemas = add_unmigrated_tenants(conn, prefix, PARALLEL_SCHEMAS)
    yield schemas
    with connection() as conn:
        remove_tenants_like(conn, prefix)


def test_a_parallel_migrate_stops_at_a_failing_tenant_naming_it_and_leaves_every_other_whole_or_untouched(
        few_unmigrated: list[str]) -> None:
    tocsin = os.path.join(os.path.dirname(sys.executable), "tocsin")
    failing = few_unmigrated[FAILING_AT - 1]
    # A committed table of the same name: the first migration's CREATE TABLE clients fails.
    with connection() as conn:
        conn.execute(sql.SQL("CREATE TABLE {}.clients (id int)").format(sql.Identifier(failing)))
    run = subprocess.run([tocsin, "migrate", "--jobs", "3"], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 4, (run.stdout, run.stderr)
    slug = failing.removeprefix("t_").replace("_", "-")
    assert f"migrating tenant {slug} (schema {failing}) failed" in run.stderr, run.stderr
    assert "every other schema is untouched" in run.stderr, run.stderr
    recorded = versions_recorded(few_unmigrated)
    assert failing not in recorded and tables_in(failing) == 1  # only the blocker
    for schema in few_unmigrated:
        if schema != failing:
            assert recorded.get(schema, 0) in (0, len(TENANT)), schema
            assert (tables_in(schema) > 0) == (schema in recorded), schema
    # No schema queued after the failure was started: at most the ones under way beside it.
    assert len(recorded) < PARALLEL_SCHEMAS - 1

    with connection() as conn:
        conn.execute(sql.SQL("DROP TABLE {}.clients").format(sql.Identifier(failing)))
    rerun = subprocess.run([tocsin, "migrate", "--jobs", "3"], capture_output=True, text=True,
                           timeout=600)
    assert rerun.returncode == 0, (rerun.stdout, rerun.stderr)
    assert f"migrated {PARALLEL_SCHEMAS - len(recorded):,} tenant schema(s)" in rerun.stdout
    assert versions_recorded(few_unmigrated) == {s: len(TENANT) for s in few_unmigrated}


def test_migrate_refuses_a_number_of_jobs_that_is_not_a_positive_whole_number() -> None:
    tocsin = os.path.join(os.path.dirname(sys.executable), "tocsin")
    for bad in ("0", "many"):
        run = subprocess.run([tocsin, "migrate", "--jobs", bad], capture_output=True, text=True,
                             timeout=60)
        assert run.returncode == 2 and "--jobs" in run.stderr, (bad, run.stderr)
