"""`make run` as a person runs it: `tocsin up` on embedded services of its own, the login
page at the printed URL, the demo tenant's reminders in the local SES endpoint after the
first tick, and Ctrl-C stopping everything."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from tests.integration.conftest import wait_until
from tocsin.shell.services import free_port

ROOT = Path(__file__).resolve().parents[2]
TOCSIN = str(Path(sys.executable).parent / "tocsin")
UP_LIMIT = 120.0  # seconds for a fresh stack (initdb included) to come up
# The test run's own services: `tocsin up` must start its own instead.
TEST_SERVICES = ("DATABASE_URL", "REDIS_URL", "SES_ENDPOINT_URL", "DRAMATIQ_NAMESPACE",
                 "TOCSIN_TEST_SERVICES_READY", "BROKER_URL")  # the embedded default is Redis


class Up:
    def __init__(self, home: Path, port: int, *args: str, **settings: str):
        self.home = home
        env = {k: v for k, v in os.environ.items()
               if k not in (*TEST_SERVICES, "SESSION_SECRET", "SESSION_SECRET_PREVIOUS", "TOCSIN_EMBEDDED")}
        env |= {"TOCSIN_HOME": str(home), "PORT": str(port), "PYTHONUNBUFFERED": "1", **settings}
        self.log = (home / "up.log").open("w+")
        # Its own session, so that a Ctrl-C can be sent to the whole group, as a terminal does.
        self.process = subprocess.Popen([TOCSIN, "up", *args], cwd=ROOT, env=env, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def ctrl_c(self) -> int:
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout=60)


@pytest.fixture
def up() -> Iterator[Up]:
    with tempfile.TemporaryDirectory(prefix="tocsin-up-") as home:
        running = Up(Path(home), free_port())
        try:
            yield running
        finally:
            if running.process.poll() is None:
                os.killpg(running.process.pid, signal.SIGKILL)
                running.process.wait(timeout=30)
            running.log.close()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def test_make_run_serves_the_login_page_sends_the_demo_reminders_and_stops_on_ctrl_c(
    up: Up,
) -> None:
    wait_until(lambda: "Press Ctrl-C" in up.output(), "tocsin up to start", UP_LIMIT)
    banner = up.output()
    portal = re.search(r"Portal:\s+(\S+)", banner)
    ses = re.search(r"Sent email \(local SES\): (\S+)", banner)
    assert portal and ses, banner
    assert "admin@demo.example" in banner and "password 'tocsin-demo'" in banner
    # The embedded services' secret: generated once, readable by its owner only.
    secret_file = up.home / "session-secret"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    secret = secret_file.read_text()

    def login_page() -> bool:
        try:
            return "Sign in" in _get(portal.group(1) + "login")
        except OSError:
            return False

    wait_until(login_page, "the login page")

    # The clock ticks once at start: every client with a milestone due today gets one email
    # per recipient (its user and the admin).
    def subjects() -> list[str]:
        messages = json.loads(_get(ses.group(1)))["ses"].get("RawMessage", [])
        return [m["raw_data"] for m in messages]

    # The demo has several clients due; wait for this one's (the order is the workers').
    wait_until(lambda: "To: ops@northwind.example" in "\n".join(subjects()),
               "Northwind's reminder", UP_LIMIT)
    sent = "\n".join(subjects())
    assert "Northwind Analytics: one week until access pauses" in sent

    # The fraud desk: the events the demo recorded as a host fire its two rules by email.
    def mailed(*lines: str) -> bool:
        return any(all(line in raw for line in lines) for raw in subjects())

    for to, subject in (("head.north@demo.example", "Large case FC-1001 in north"),
                        ("head.south@demo.example", "Large case FC-1003 in south"),
                        ("sam@demo.example", "Case FC-1002 is now yours")):
        wait_until(partial(mailed, f"To: {to}", f"Subject: {subject}"), f"{subject!r} to {to}", UP_LIMIT)
    assert not mailed("Large case FC-1002")  # 18,500 is not a large case

    # The README's first screen: one event with curl and the key the banner printed.
    key = re.search(r"Demo API key \(events API\): (tsk_\S+)", banner)
    assert key, banner
    request = urllib.request.Request(
        portal.group(1) + "api/v1/events", method="POST",
        headers={"Authorization": f"Bearer {key.group(1)}", "Content-Type": "application/json",
                 "Idempotency-Key": "case-C-1042-created"},
        data=json.dumps({"product": "fraud", "type": "created",
                         "subject": {"kind": "case", "external_id": "C-1042", "title": "Card fraud",
                                     "hierarchy": {"region": "north"},
                                     "fields": {"amount": 1500000}}}).encode())
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status in (200, 201) and "event_id" in json.loads(response.read())
    wait_until(lambda: mailed("To: head.north@demo.example", "Subject: Large case C-1042 in north"),
               "the curl event's email", UP_LIMIT)

    # The status line of the banner, run from another terminal: every queue consumed, the
    # demo tenant swept (the clock sweeps once at start).
    status = re.search(r"Status:\s+(.+)", banner)
    assert status, banner
    *assignments, command, verb = shlex.split(status.group(1))
    env = {k: v for k, v in os.environ.items() if k not in TEST_SERVICES}
    env |= dict(a.split("=", 1) for a in assignments)

    def status_ok() -> bool:
        done = subprocess.run([command, verb], env=env, capture_output=True, text=True, timeout=60)
        return done.returncode == 0 and "\ndemo " in done.stdout

    wait_until(status_ok, "tocsin status to say ok", UP_LIMIT)

    up.ctrl_c()
    assert "Stopped." in up.output()
    assert not (up.home / "pg" / "postmaster.pid").exists()  # PostgreSQL was shut down
    assert _processes_using(up.home) == []  # nor is Redis, moto, a worker or the web left

    # A second `make run` finds the data of the first.
    again = Up(up.home, free_port())
    try:
        wait_until(lambda: "Press Ctrl-C" in again.output(), "the second tocsin up", UP_LIMIT)
        second = again.output()
        assert "migrations: 0 applied" in second
        assert "Demo tenant already seeded; reusing it." in second
        assert secret_file.read_text() == secret
        again.ctrl_c()
    finally:
        if again.process.poll() is None:
            os.killpg(again.process.pid, signal.SIGKILL)
            again.process.wait(timeout=30)
        again.log.close()
    assert _processes_using(up.home) == []


def _processes_using(home: Path) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(home) in cmdline:
                found.append(cmdline)
    return found


@pytest.fixture
def their_database() -> Iterator[str]:
    """A database `tocsin up` did not start: an empty one on the test server."""
    name = f"theirs_{uuid.uuid4().hex[:8]}"
    server = os.environ["DATABASE_URL"]
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(server)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def _on(database: str) -> dict[str, str]:
    return {"DATABASE_URL": database, "REDIS_URL": os.environ["REDIS_URL"],
            "SES_ENDPOINT_URL": os.environ["SES_ENDPOINT_URL"],
            "DRAMATIQ_NAMESPACE": f"tocsin-up-{uuid.uuid4().hex[:8]}"}


def _tenants(database: str) -> list[str] | None:
    """The tenants of that database, or None if nothing was ever written there."""
    with psycopg.connect(database) as conn:
        if conn.execute("SELECT to_regclass('control.tenants')").fetchone() == (None,):
            return None
        return [str(r[0]) for r in conn.execute("SELECT slug FROM control.tenants")]


def _run_up(home: Path, *args: str, **settings: str) -> str:
    """`tocsin up` until its banner, then Ctrl-C; its output."""
    running = Up(home, free_port(), *args, **settings)
    try:
        wait_until(lambda: "Press Ctrl-C" in running.output() or running.process.poll() is not None,
                   "tocsin up to start", UP_LIMIT)
        output = running.output()
        assert running.ctrl_c() == 0, output
        return output
    finally:
        if running.process.poll() is None:
            os.killpg(running.process.pid, signal.SIGKILL)
            running.process.wait(timeout=30)
        running.log.close()


def test_tocsin_up_on_a_database_it_did_not_start_refuses_the_published_secret_and_writes_nothing(
    their_database: str, tmp_path: Path
) -> None:
    refused = subprocess.run([TOCSIN, "up"], cwd=ROOT, capture_output=True, text=True, timeout=UP_LIMIT,
                             env={**{k: v for k, v in os.environ.items() if k not in (
                                 "SESSION_SECRET", "TOCSIN_EMBEDDED", "TOCSIN_TEST_SERVICES_READY")},
                                  "TOCSIN_HOME": str(tmp_path), "PORT": str(free_port()),
                                  **_on(their_database)})

    assert refused.returncode == 2
    errors = refused.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("tocsin: error: SESSION_SECRET "), refused.stderr
    assert _tenants(their_database) is None
    assert not (tmp_path / "session-secret").exists()


def test_tocsin_up_seeds_the_demo_into_a_database_it_did_not_start_only_when_asked(
    their_database: str, tmp_path: Path
) -> None:
    settings = {**_on(their_database), "SESSION_SECRET": secrets.token_urlsafe(48)}

    plain = _run_up(tmp_path, **settings)

    assert "Demo tenant: not seeded" in plain and "add --demo" in plain
    assert "tocsin-demo" not in plain
    assert _tenants(their_database) == []

    asked = _run_up(tmp_path, "--demo", **settings)

    assert "admin@demo.example" in asked and "password 'tocsin-demo'" in asked
    assert _tenants(their_database) == ["demo"]
