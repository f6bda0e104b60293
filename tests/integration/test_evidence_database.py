"""EVIDENCE_DATABASE_URL: the ledger export reads through the database it names (a read
replica in production; here the same server under a role that can only read, which is all
a replica would allow)."""

from __future__ import annotations

import os
import uuid
from dataclasses import replace

import pytest
from litestar.testing import TestClient
from psycopg import sql
from psycopg.conninfo import make_conninfo

from db.evidence.export_budget import APPLICATION_NAME
from db.platform.pool import connection
from portal.settings import load_portal_settings
from tests.integration.portal_support import People, signed_in
from tocsin.boot.web import build_app
from tocsin.core import runtime


@pytest.mark.skipif(bool(os.environ.get("TEST_PGBOUNCER")),  # make test-pgbouncer
                    reason="the test PgBouncer knows only the suite's role, "
                    "not the read-only one this test makes")
def test_the_ledger_export_reads_through_the_evidence_database_and_needs_only_select(
        people: People) -> None:
    role = f"evidence_{uuid.uuid4().hex[:8]}"
    reader = sql.Identifier(role)
    schemas = sql.SQL(", ").join(map(sql.Identifier, ("control", people.tenant.schema)))
    with connection() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(reader))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schemas, reader))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(schemas, reader))
    try:
        settings = runtime.settings()
        portal_settings = replace(load_portal_settings(settings.portal_url),
                                  evidence_database_url=make_conninfo(os.environ["DATABASE_URL"],
                                                                      user=role))
        # Export connections another test's app still holds in this process are not this one's.
        with connection() as conn:
            started = conn.execute("SELECT clock_timestamp()").fetchone()
        with TestClient(app=build_app(settings, portal_settings)) as portal:
            signed_in(portal, people, people.admin)
            export = portal.get("/ledger.csv")
            assert export.status_code == 200
            assert "d7" in export.text and "claimed" in export.text  # the client's reminder
            with connection() as conn:
                users = {str(r[0]) for r in conn.execute(
                    "SELECT usename FROM pg_stat_activity WHERE application_name = %s "
                    "AND datname = current_database() AND backend_start >= %s",
                    [APPLICATION_NAME, started and started[0]]).fetchall()}
            assert users == {role}
            # The pages still read from DATABASE_URL.
            assert portal.get("/ledger").status_code == 200
    finally:
        with connection() as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                         [role])
            conn.execute(sql.SQL("DROP OWNED BY {}").format(reader))
            conn.execute(sql.SQL("DROP ROLE {}").format(reader))
