"""`tocsin up` itself (honcho and the Procfile), stopped with Ctrl-C in the middle of a run and
started again, on the test session's services: nothing lost, nothing doubled."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO
from zoneinfo import ZoneInfo

import pytest

from db.platform.tenancy import Tenant
from tests.integration.builders import add_clients_in_bulk
from tests.integration.conftest import SesOutbox, wait_until
from tests.support.faulty_ses import FaultySes
from tests.support.procfile_stack import ROOT, processes_with_environment
from tests.support.rabbitmq import create_vhost, delete_vhost
from tests.system.conftest import SYSTEM_SETTINGS
from tests.system.outcomes import RECOVERY_LIMIT, assert_each_accepted_once, delivery_ids, statuses
from tocsin.shell.services import free_port

TOCSIN = str(Path(sys.executable).parent / "tocsin")
IN_FLIGHT = 2 * 4  # the Procfile's default worker processes times threads
STOP_LIMIT = 60.0  # seconds for Ctrl-C to stop everything


class Up:
    """One `tocsin up --no-demo` in a session of its own, as in a terminal."""

    def __init__(self, home: Path, env: dict[str, str]):
        self.port = free_port()
        self.log: IO[str] = (home / f"up-{self.port}.log").open("w+")
        self.process = subprocess.Popen([TOCSIN, "up", "--no-demo"], cwd=ROOT,
                                        env=env | {"PORT": str(self.port)}, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def portal(self) -> str:
        wait_until(lambda: "Press Ctrl-C" in self.output(), "tocsin up to start", RECOVERY_LIMIT)
        found = re.search(r"Portal:\s+(\S+?)/?$", self.output(), re.MULTILINE)
        assert found, self.output()
        return found.group(1)

    def ctrl_c(self) -> int:
        os.killpg(self.process.pid, signal.SIGINT)  # what a terminal sends the foreground group
        return self.process.wait(timeout=STOP_LIMIT)


@dataclass
class UpRuns:
    """`tocsin up` runs on the session's services, in a namespace of their own."""

    home: Path
    env: dict[str, str]
    runs: list[Up]

    def start(self, **settings: str) -> Up:
        run = Up(self.home, self.env | settings)
        self.runs.append(run)
        return run

    def left_running(self) -> list[int]:
        return processes_with_environment("DRAMATIQ_NAMESPACE", self.env["DRAMATIQ_NAMESPACE"])


@pytest.fixture
def tocsin_up(tmp_path: Path) -> Iterator[UpRuns]:
    """Whatever the runs started is killed afterwards, even Dramatiq in its own session."""
    env = {**os.environ, **SYSTEM_SETTINGS, "TOCSIN_HOME": str(tmp_path), "PYTHONUNBUFFERED": "1",
           "DRAMATIQ_NAMESPACE": f"tocsin-up-{uuid.uuid4().hex[:8]}"}
    rabbitmq = env.get("BROKER_URL")
    if rabbitmq:  # RabbitMQ has no namespace: a vhost of its own
        env["BROKER_URL"] = create_vhost(rabbitmq, env["DRAMATIQ_NAMESPACE"])
    runs = UpRuns(tmp_path, env, [])
    try:
        yield runs
    finally:
        for pid in runs.left_running():
            os.kill(pid, signal.SIGKILL)
        for run in runs.runs:
            if run.process.poll() is None:
                run.process.kill()
            run.process.wait(timeout=STOP_LIMIT)
            run.log.close()
        if rabbitmq:
            delete_vhost(rabbitmq, env["DRAMATIQ_NAMESPACE"])


def test_ctrl_c_of_tocsin_up_in_the_middle_of_sending_then_up_again_loses_and_doubles_nothing(
    tenant: Tenant, ses: SesOutbox, tocsin_up: UpRuns,
) -> None:
    today = datetime.now(ZoneInfo(tenant.time_zone)).date()
    add_clients_in_bulk(tenant, 50, today + timedelta(days=7), 5)
    with FaultySes(ses.endpoint, policy=lambda n: "hold" if n > 60 else "pass") as provider:
        first = tocsin_up.start(SES_ENDPOINT_URL=provider.url)
        portals = {first.portal()}
        wait_until(lambda: provider.count("hold") >= IN_FLIGHT,
                   "every worker thread to wait on a send", RECOVERY_LIMIT)
        try:
            code = first.ctrl_c()
        finally:
            provider.policy = lambda n: "pass"
            provider.release()  # the sends in flight get their answers while the workers stop
        assert code == 0, first.output()
        assert "Stopped." in first.output()
        wait_until(lambda: tocsin_up.left_running() == [], "every process of the first run to end")
        halfway = statuses(tenant)
        assert 60 <= halfway["accepted"] < 250 and halfway["pending"] > 0, halfway

        second = tocsin_up.start(SES_ENDPOINT_URL=provider.url)
        portals.add(second.portal())
        wait_until(lambda: statuses(tenant) == Counter({"accepted": 250}), "every email",
                   RECOVERY_LIMIT)
        assert second.ctrl_c() == 0, second.output()
        wait_until(lambda: tocsin_up.left_running() == [], "every process of the second run to end")
    assert_each_accepted_once(tenant, ses, delivery_ids(tenant))
    # Every link names a portal `tocsin up` announced, never a worker's own PORT.
    hosts = {urllib.parse.urlsplit(m.headers["List-Unsubscribe"].strip("<>")).netloc
             for m in ses.sent() if f".{tenant.slug}@" in m.message_id}
    assert hosts <= {urllib.parse.urlsplit(p).netloc for p in portals}, (hosts, portals)
