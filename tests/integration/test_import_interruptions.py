"""An import whose process died mid-run (the web process restarted) no longer stays "running"
forever: its run holds a lease it renews while alive, and once the lease has expired (the
clock moved past it, as no heartbeat came) the import shows as interrupted, with nothing of
it kept; an administrator resumes it (the same rows and choice, idempotent by external id)
or starts over from its report. A live run is not interrupted, and a run given up for dead
that comes back writes nothing over its successor. One test kills a real portal process
with SIGKILL in the middle of an import's transaction."""

from __future__ import annotations

import re
import signal
from datetime import timedelta

import httpx

from db.platform.imports import LEASE, start_import
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import scalar
from tests.integration.conftest import WAIT_LIMIT, wait_until
from tests.integration.portal_support import PASSWORD, People, PortalClient, csrf_token, signed_in
from tests.integration.test_subject_import import big_file
from tests.support.portal_server import ROOT, portal_process
from tocsin.core.clock import pinned, utcnow

FILE = b"external_id,name,expires_on\r\nA-1,Acme,2031-01-01\r\nA-2,Bolt,2031-02-01\r\nA-3,Crane,bad\r\n"


def staged(portal: PortalClient, html: str) -> tuple[int, str]:
    answer = portal.post("/clients/import", data={"_csrf_token": csrf_token(html)},
                         files={"file": ("c.csv", FILE, "text/csv")}, follow_redirects=False)
    assert answer.status_code == 303
    report = str(answer.headers["location"])
    return int(report.rsplit("/", 1)[1]), report


def claimed_by_a_process_that_dies(tenant: Tenant, import_id: int) -> int:
    """What the run route does before its process dies: the import claimed, no run started
    (so no heartbeat ever renews the lease). The claim's attempt."""
    with tenant_tx(tenant.slug) as tx:
        return start_import(tx, import_id, "clients", "valid_only")


def finished(tenant: Tenant, import_id: int) -> None:
    wait_until(lambda: scalar(tenant, "SELECT stage FROM imports WHERE id = %s", import_id)
               in ("done", "failed"), "the import to end")


def test_an_import_whose_process_died_shows_interrupted_and_resumes(
    portal: PortalClient, people: People
) -> None:
    html = signed_in(portal, people, people.admin)
    import_id, report = staged(portal, html)
    claimed_by_a_process_that_dies(people.tenant, import_id)
    page = portal.get(report).text
    assert "Importing…" in page and "Interrupted" not in page  # within its lease: running
    answer = portal.post(f"{report}/resume", data={"_csrf_token": csrf_token(page)}, follow_redirects=False)
    assert answer.status_code == 409  # a live run is not taken over

    with pinned(utcnow() + LEASE + timedelta(seconds=1)):
        page = portal.get(report).text
        fragment = portal.get(f"{report}/progress").text
        assert "Interrupted" in page and "Nothing of it was kept" in page
        assert "hx-trigger" not in fragment  # no longer polled
        assert scalar(people.tenant, "SELECT count(*) FROM clients WHERE external_id IS NOT NULL") == 0
        answer = portal.post(f"{report}/resume", data={"_csrf_token": csrf_token(page)},
                             follow_redirects=False)
        assert answer.status_code == 303
        finished(people.tenant, import_id)
        page = portal.get(report).text
    assert "2 created, 0 updated, 0 unchanged" in page  # the same choice: the valid rows only
    assert scalar(people.tenant, "SELECT count(*) FROM clients WHERE external_id IS NOT NULL") == 2
    assert scalar(people.tenant, "SELECT count(*) FROM audit_log WHERE action = 'import.resume'") == 1


def test_an_interrupted_import_can_start_over_from_its_report(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.admin)
    import_id, report = staged(portal, html)
    first = claimed_by_a_process_that_dies(people.tenant, import_id)
    with pinned(utcnow() + LEASE + timedelta(seconds=1)):
        page = portal.get(report).text
        answer = portal.post(f"{report}/restart", data={"_csrf_token": csrf_token(page)},
                             follow_redirects=False)
        assert answer.status_code == 303
    page = portal.get(report).text
    assert "Import the valid rows only" in page  # back to the report, to choose again
    assert scalar(people.tenant, "SELECT stage FROM imports WHERE id = %s", import_id) == "validated"

    # The run given up for dead comes back: its attempt is no longer the import's, it writes nothing.
    from db.evidence.audit import current_actor
    from db.people.client_import import CLIENT_IMPORT
    from db.platform.imports import run_import

    run_import(people.tenant.slug, import_id, current_actor(), CLIENT_IMPORT, first)
    assert scalar(people.tenant, "SELECT count(*) FROM clients WHERE external_id IS NOT NULL") == 0
    assert scalar(people.tenant, "SELECT stage FROM imports WHERE id = %s", import_id) == "validated"

    answer = portal.post(f"{report}/run", data={"_csrf_token": csrf_token(page), "mode": "valid_only"},
                         follow_redirects=False)
    assert answer.status_code == 303
    finished(people.tenant, import_id)
    assert "2 created" in portal.get(report).text
    assert scalar(people.tenant, "SELECT count(*) FROM audit_log WHERE action = 'import.restart'") == 1


def test_a_portal_killed_in_the_middle_of_an_import_leaves_it_interrupted_with_nothing_kept(
    portal: PortalClient, people: People
) -> None:
    data, bad = big_file()
    with portal_process(ROOT / "test-artifacts" / "portal-killed-import.log") as (url, server), \
            httpx.Client(base_url=url, follow_redirects=False, timeout=WAIT_LIMIT) as browser:
        login = browser.get("/login").text
        assert browser.post("/login", data={
            "organisation": people.tenant.slug, "email": people.admin.email, "password": PASSWORD,
            "next": "/", "_csrf_token": csrf_token(login)}).status_code == 303
        html = browser.get("/subjects/import").text
        uploaded = browser.post("/subjects/import", data={"_csrf_token": csrf_token(html)},
                                files={"file": ("subjects.csv", data, "text/csv")})
        assert uploaded.status_code == 303
        report = uploaded.headers["location"]
        import_id = int(report.rsplit("/", 1)[1])
        page = browser.get(report).text
        # The subjects table held by this test: the run stops at its first write, inside its
        # transaction, whatever the machine's speed; then its process is killed.
        with tenant_tx(people.tenant.slug) as hold:
            hold.conn.execute("LOCK TABLE subjects IN SHARE MODE")
            # The server's own pid, asked inside the transaction: through PgBouncer the
            # connection's startup pid is the pooler's, not the backend holding the lock.
            row = hold.conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            holder = int(str(row[0]))
            assert browser.post(f"{report}/run", data={"_csrf_token": csrf_token(page),
                                                       "mode": "valid_only"}).status_code == 303
            wait_until(lambda: blocked_on_subjects(holder), "the run to write")
            server.send_signal(signal.SIGKILL)
            server.wait()
    assert scalar(people.tenant, "SELECT stage FROM imports WHERE id = %s", import_id) == "running"
    # Its transaction never committed: it dies with its connection.
    assert scalar(people.tenant, "SELECT count(*) FROM subjects WHERE product = 'manual'") == 0

    html = signed_in(portal, people, people.admin)
    assert "Importing…" in portal.get(report).text  # within its lease, nobody can tell yet
    with pinned(utcnow() + LEASE + timedelta(seconds=1)):
        page = portal.get(report).text
        assert "Interrupted" in page and "Nothing of it was kept" in page
        assert portal.post(f"{report}/resume", data={"_csrf_token": csrf_token(page)},
                           follow_redirects=False).status_code == 303
        finished(people.tenant, import_id)
        page = portal.get(report).text
    done = re.search(r"([\d,]+) created, 0 updated, 0 unchanged", page)
    good = 10_000 - len(bad)
    assert done and int(done.group(1).replace(",", "")) == good
    assert scalar(people.tenant, "SELECT count(*) FROM subjects WHERE product = 'manual'") == good


def blocked_on_subjects(holder: int) -> bool:
    """A backend waiting for the lock this test's connection ``holder`` holds on subjects."""
    from db.platform.pool import connection

    with connection() as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                           "AND %s = ANY(pg_blocking_pids(pid))", [holder]).fetchone()
    return row is not None and int(str(row[0])) > 0
