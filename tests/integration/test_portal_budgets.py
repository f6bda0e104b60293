"""One tenant cannot starve the others, over HTTP against a real portal (uvicorn in a
subprocess) with a small database pool: ledger exports read very slowly by raw sockets and
many open event streams run while other tenants sign in and read their inbox. Exports have
their own connections and a cap per tenant, streams a cap per user and per process, the
whole download a time limit, and request bodies a size limit."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from urllib.parse import urlsplit

import httpx
import pytest

from db.evidence.export_budget import APPLICATION_NAME
from db.platform.pool import connection
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import PASSWORD, add_admin, add_client
from tests.integration.conftest import WAIT_LIMIT, wait_until
from tests.integration.portal_support import forget_sign_in_failures, local_today
from tests.support.portal_server import ROOT, serve_portal

LOGS = ROOT / "test-artifacts"
# Ledger rows of an attacking tenant: several megabytes of CSV, more than the socket buffers
# between a reader that stops reading and the portal, so the export really waits on it.
BIG_LEDGER = 100_000
BUDGET = {
    "DB_POOL_MAX": "3",  # the pool every page of every tenant needs: small, so it shows
    "EXPORT_CONNECTIONS": "2", "EXPORTS_PER_TENANT": "1",
    "INBOX_STREAMS_PER_USER": "2", "INBOX_STREAMS_PER_PROCESS": "5",
}


@pytest.fixture(scope="module")
def budget_url() -> Iterator[str]:
    with serve_portal(LOGS / "portal-budgets.log", **BUDGET) as url:
        yield url


def big_ledger(tenant: Tenant, rows: int = BIG_LEDGER) -> None:
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute(
            """
            INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on,
                                             status, local_date, claimed_at)
            SELECT 'licence', 'client', 1000000 + g, 'd30', DATE '2027-01-01' + (g %% 300),
                   'claimed', DATE '2026-12-01', now() - make_interval(secs => g)
            FROM generate_series(1, %s) AS g
            """,
            [rows],
        )


@contextmanager
def browser(url: str, tenant: Tenant, email: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=WAIT_LIMIT) as client:
        token = re.search(r'name="_csrf_token" value="([^"]+)"', client.get("/login").text)
        assert token
        signed = client.post("/login", data={"organisation": tenant.slug, "email": email,
                                             "password": PASSWORD, "next": "/",
                                             "_csrf_token": token.group(1)})
        assert signed.status_code == 303, signed.text
        yield client


class SlowReader:
    """GET /ledger.csv on a raw socket with a tiny receive buffer, then a few bytes at a time
    (a thread reads 16 bytes, pauses, reads 16 more), the way an attacker ties up a download."""

    def __init__(self, url: str, cookies: httpx.Cookies, path: str = "/ledger.csv") -> None:
        parts = urlsplit(url)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
        cookie = "; ".join(f"{name}={value}" for name, value in cookies.items())
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nCookie: {cookie}\r\n\r\n".encode())
        self.received = bytearray()
        while b"\r\n" not in self.received:
            chunk = self.sock.recv(64)
            assert chunk, "the portal closed the connection before answering"
            self.received += chunk
        self.status = int(self.received.split(b" ", 2)[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()

    def _trickle(self) -> None:
        while not self._stop.wait(0.5):
            try:
                chunk = self.sock.recv(16)
            except OSError:
                return
            if not chunk:
                return
            self.received += chunk

    def read_to_the_end(self) -> bytes:
        """Stop trickling and read what is left until the portal closes the connection."""
        self._stop.set()
        self._thread.join(WAIT_LIMIT)
        self.sock.settimeout(WAIT_LIMIT)
        while chunk := self.sock.recv(1 << 16):
            self.received += chunk
        return bytes(self.received)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_LIMIT)
        self.sock.close()


# When the test began, as PostgreSQL tells time: export connections opened before it belong
# to apps an earlier test built in this process (under pytest-xdist, in the same database).
_began: list[object] = []


def export_backends() -> list[str]:
    """The states of the export connections opened since the test began, as PostgreSQL sees them."""
    with connection() as conn:
        rows = conn.execute(
            "SELECT state FROM pg_stat_activity WHERE application_name = %s "
            "AND datname = current_database() AND backend_start >= %s", [APPLICATION_NAME, _began[-1]]
        ).fetchall()
    return [str(r[0]) for r in rows]


def exports_waiting_on_readers(count: int) -> bool:
    return export_backends().count("idle in transaction") == count


def test_slow_exports_and_many_streams_leave_other_tenants_signing_in_and_reading(
    budget_url: str, make_tenant: Callable[[], Tenant]
) -> None:
    forget_sign_in_failures()
    with connection() as conn:
        _began.append(conn.execute("SELECT now()").fetchone()[0])  # type: ignore[index]
    attackers: list[Tenant] = [make_tenant(), make_tenant(), make_tenant()]
    for tenant in attackers:
        add_admin(tenant)
        big_ledger(tenant)
    bystanders: list[Tenant] = [make_tenant(), make_tenant()]
    readers = []
    for tenant in bystanders:
        _, (user,) = add_client(tenant, local_today(tenant) + timedelta(days=100), name="Bystander Ltd")
        readers.append((tenant, user.email))

    with ExitStack() as stack:
        admins = [stack.enter_context(browser(budget_url, t, "admin@example.com")) for t in attackers]
        # Tenant one asks for its export twice, tenant two once: each holds an export
        # connection while its reader trickles, until both export connections are taken.
        first = SlowReader(budget_url, admins[0].cookies)
        stack.callback(first.close)
        second_of_first = SlowReader(budget_url, admins[0].cookies)
        stack.callback(second_of_first.close)
        second = SlowReader(budget_url, admins[1].cookies)
        stack.callback(second.close)
        assert (first.status, second.status) == (200, 200)
        assert second_of_first.status == 429  # one export per tenant at once
        assert b"already running" in second_of_first.read_to_the_end()
        wait_until(lambda: exports_waiting_on_readers(2), "both exports to wait on their readers")
        third = admins[2].get("/ledger.csv")  # every export connection is in use
        assert third.status_code == 503 and "Too many ledger exports" in third.text
        assert int(third.headers["Retry-After"]) > 0

        # Streams: two for one reader (its cap), then more until the process's cap.
        streams, opened = [], []
        for admin in admins:
            for _ in range(2):
                stream = stack.enter_context(admin.stream("GET", "/inbox/stream"))
                streams.append(stream.status_code)
                if stream.status_code == 200:
                    lines = stream.iter_lines()
                    assert next(lines) == ": watching"  # open, and counted
                    opened.append(lines)
        assert streams == [200, 200, 200, 200, 200, 503], streams  # the process holds five
        with admins[0].stream("GET", "/inbox/stream") as over_user_cap:
            assert over_user_cap.status_code == 429
            assert int(over_user_cap.headers["Retry-After"]) > 0
        # The page whose stream was refused keeps its poll: what it asks still answers.
        assert admins[0].get("/inbox/newer", headers={"HX-Request": "true"}).status_code == 200

        # Meanwhile every other tenant signs in and reads its inbox as usual.
        for tenant, email in readers:
            for _ in range(3):
                with browser(budget_url, tenant, email) as reader:
                    inbox = reader.get("/")
                    assert inbox.status_code == 200 and 'id="unread-badge"' in inbox.text
                    assert reader.get("/inbox/badge", headers={"HX-Request": "true"}).status_code == 200
        assert export_backends().count("idle in transaction") == 2  # still held, on their own
        assert len(export_backends()) <= int(BUDGET["EXPORT_CONNECTIONS"])


def test_an_export_stops_at_its_time_limit_and_gives_its_connection_back(tenant: Tenant) -> None:
    forget_sign_in_failures()
    add_admin(tenant)
    big_ledger(tenant)
    with serve_portal(LOGS / "portal-export-limit.log", EXPORT_SECONDS="2",
                      EXPORT_CONNECTIONS="1", EXPORTS_PER_TENANT="1") as url, \
            browser(url, tenant, "admin@example.com") as admin:
        stalled = SlowReader(url, admin.cookies)
        one_claim = {"subject": "1000001"}  # a small export: it must fit in its own 2 seconds
        try:
            assert stalled.status == 200
            # Its time is up while its reader still trickles: the connection is given back
            # and the next export (the same tenant's, on the only export connection) runs.
            wait_until(lambda: admin.get("/ledger.csv", params=one_claim).status_code == 200,
                       "the stalled export to be stopped")
            cut = stalled.read_to_the_end()
        finally:
            stalled.close()
        small = admin.get("/ledger.csv", params=one_claim)
    assert small.status_code == 200 and small.text.count("\n") == 2  # the header and the claim
    # The stalled reader got a broken download, never a short file that looks complete.
    assert cut.startswith(b"HTTP/1.1 200") and b"chunked" in cut
    assert not cut.endswith(b"0\r\n\r\n") and len(cut) < BIG_LEDGER * 50


def test_an_oversized_body_is_refused_with_413_and_changes_nothing(budget_url: str, tenant: Tenant) -> None:
    forget_sign_in_failures()
    add_admin(tenant)
    with httpx.Client(base_url=budget_url, timeout=WAIT_LIMIT) as client:
        token = re.search(r'name="_csrf_token" value="([^"]+)"', client.get("/login").text)
        assert token
        huge = client.post("/login", data={
            "organisation": tenant.slug, "email": "admin@example.com", "password": PASSWORD,
            "next": "/" + "x" * 100_000, "_csrf_token": token.group(1)})
        assert huge.status_code == 413 and "too large" in huge.text
        assert "tocsin_session" not in client.cookies
        hook = client.post("/hooks/ses", content=b"{" + b" " * 300_000 + b"}",
                           headers={"Content-Type": "text/plain"})
        assert hook.status_code == 413
        # The same sign-in at a normal size goes through: nothing was held against it.
        fine = client.post("/login", data={
            "organisation": tenant.slug, "email": "admin@example.com", "password": PASSWORD,
            "next": "/", "_csrf_token": token.group(1)})
        assert fine.status_code == 303
