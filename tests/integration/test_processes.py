"""The Procfile's worker and clock as real processes: the clock's first tick reaches the
worker, the worker scans and sends, and both stop cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from db.platform.tenancy import Tenant
from tests.integration.builders import add_client, claimed
from tests.integration.conftest import SesOutbox, wait_until

TOCSIN = str(Path(sys.executable).parent / "tocsin")


def _start(*args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SCAN_INTERVAL_SECONDS": "3600"}
    return subprocess.Popen([TOCSIN, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen[bytes]) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    try:
        output, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError(f"did not stop on SIGTERM:\n{output.decode()}") from None
    return process.returncode, output.decode()


def test_the_clocks_first_tick_is_scanned_and_sent_by_a_dramatiq_worker_process(
    tenant: Tenant, ses: SesOutbox
) -> None:
    today = datetime.now(UTC).date()
    client, users = add_client(tenant, today + timedelta(days=5), name="Process Ltd", users=1)
    worker = _start("worker", "--processes", "1", "--threads", "2")
    clock = _start("clock")
    try:
        wait_until(lambda: (client.id, "d7") in claimed(tenant), "the clock's tick to be scanned")
        wait_until(lambda: any(e.to == users[0].email for e in ses.sent()), "the reminder email")
    finally:
        clock_code, clock_out = _stop(clock)
        worker_code, worker_out = _stop(worker)
    assert clock_code == 0, clock_out
    assert "tick enqueued" in clock_out
    assert worker_code == 0, worker_out
    assert f"scanned tenant={tenant.slug}" in worker_out  # operators see each scan's counts
    assert users[0].email not in worker_out  # but never an address
    assert [e.to for e in ses.sent()].count(users[0].email) == 1


def test_a_worker_that_keeps_crashing_at_start_is_restarted_then_given_up_with_an_error() -> None:
    # A setting the actors refuse at import: Dramatiq exits at once, every time.
    env = {**os.environ, "DATABASE_URL": "mysql://nowhere/tocsin"}
    process = subprocess.Popen([TOCSIN, "worker", "--processes", "1", "--threads", "1"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError(f"kept restarting a worker that cannot start:\n{output.decode()}") from None
    log = output.decode()
    assert process.returncode != 0, log
    assert log.count("restarting it in") == 4, log  # said each time, with its back-off
    assert "exited 5 times within 60s" in log and "giving up" in log
