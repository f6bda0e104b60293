"""The Procfile's processes, started as `tocsin up` starts them, for tests that judge the
product from outside.

Each Procfile line runs through `/bin/sh -c` (as honcho runs it) in its own process group,
with the environment `tocsin up` hands to honcho (tocsin.shell.processes.procfile_environment)
and the PORT honcho would give it, on the test session's PostgreSQL, Redis and local SES
endpoint, in a Dramatiq namespace of its own (and, on RabbitMQ, a vhost of its own). A line
may be started more than once (three clocks, a second worker). Every process the stack
starts carries its namespace in its environment, so `close()` finds and ends them all,
orphans included, even after a failure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.integration.conftest import WAIT_LIMIT, wait_until
from tests.support.rabbitmq import create_vhost, delete_vhost
from tocsin.shell.processes import procfile_environment
from tocsin.shell.services import free_port

ROOT = Path(__file__).resolve().parents[2]
PROCFILE = ROOT / "Procfile"
HONCHO_PORT_STEP = 100  # honcho gives the n-th Procfile line PORT = base port + 100 * n
STOP_LIMIT = 60.0  # seconds a stopped process may take to exit before it is killed


def procfile_commands(path: Path = PROCFILE) -> dict[str, str]:
    """The Procfile's lines, name to command, in file order."""
    commands: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, colon, command = line.partition(":")
        assert colon and command.strip(), f"not a Procfile line: {raw!r}"
        commands[name.strip()] = command.strip()
    return commands


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # the process is gone, or not ours to read
        return b""


def cmdline(pid: int) -> list[str]:
    return [part.decode() for part in _read(f"/proc/{pid}/cmdline").split(b"\0") if part]


def environment(pid: int) -> dict[str, str]:
    entries = (part.decode().partition("=") for part in _read(f"/proc/{pid}/environ").split(b"\0") if part)
    return {name: value for name, _, value in entries}


def _parent(pid: int) -> int | None:
    stat = _read(f"/proc/{pid}/stat").decode()
    if not stat:
        return None
    return int(stat.rpartition(")")[2].split()[1])  # the command name may hold spaces


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def descendants(pid: int) -> list[int]:
    parents = {p: _parent(p) for p in _all_pids()}
    found: list[int] = []
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        children = [p for p, parent in parents.items() if parent == current]
        found.extend(children)
        frontier.extend(children)
    return found


def processes_with_environment(name: str, value: str) -> list[int]:
    """Processes of this user whose environment holds name=value."""
    entry = f"{name}={value}".encode()
    return [p for p in _all_pids() if p != os.getpid()
            and entry in _read(f"/proc/{p}/environ").split(b"\0")]


def is_dramatiq(pid: int) -> bool:
    args = cmdline(pid)
    return "-m" in args and "dramatiq" in args


def stopped(pid: int) -> bool:
    stat = _read(f"/proc/{pid}/stat").decode()
    return bool(stat) and stat.rpartition(")")[2].split()[0] == "T"


def listens_on(port: int, pid: int) -> bool:
    """Whether this process holds the listening socket of a local TCP port."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in _read(table).decode().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    try:
        links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        return False
    return bool(links & inodes)


def connected_to(port: int, pids: list[int]) -> list[int]:
    """Which of these processes hold an open TCP connection to a local port."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in _read(table).decode().splitlines()[1:]:
            fields = row.split()
            established = fields[3] == "01"
            if established and int(fields[2].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    holders = []
    for pid in pids:
        try:
            links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        except OSError:
            continue
        if links & inodes:
            holders.append(pid)
    return holders


def _signal(pids: list[int], signum: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


@dataclass
class ProcfileProcess:
    """One started Procfile line."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def running(self) -> bool:
        return self.process.poll() is None

    def pids(self) -> list[int]:
        return [self.process.pid, *descendants(self.process.pid)] if self.running() else []

    def dramatiq_master(self) -> int | None:
        return next((p for p in self.pids() if is_dramatiq(p) and not is_dramatiq(_parent(p) or 0)),
                    None)

    def dramatiq_workers(self) -> list[int]:
        """Dramatiq's worker processes: the ones that run the actors."""
        master = self.dramatiq_master()
        return [] if master is None else [p for p in descendants(master) if is_dramatiq(p)]

    def send(self, signum: signal.Signals) -> None:
        """A signal to the line's process group, as honcho (or a terminal) sends it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)

    def kill_everything(self) -> None:
        """kill -9 of every process of this line (a worker's Dramatiq runs in a session of
        its own, so its processes are found by ancestry, not by group)."""
        _signal(self.pids(), signal.SIGKILL)
        self.process.wait(timeout=STOP_LIMIT)

    def stop(self) -> int:
        """SIGTERM to the group, as honcho stops a line; the exit code."""
        self.send(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_LIMIT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not stop on SIGTERM; see {self.log}") from None


class ProcfileStack:
    def __init__(self, logs: Path, **settings: str):
        self.namespace = f"tocsin-sys-{uuid.uuid4().hex[:8]}"
        self.web_port = free_port()
        self.portal_url = f"http://127.0.0.1:{self.web_port}"
        self.commands = procfile_commands()
        self.logs = logs
        self.logs.mkdir(parents=True, exist_ok=True)
        base = {**os.environ, "DRAMATIQ_NAMESPACE": self.namespace, "PYTHONUNBUFFERED": "1",
                **settings}
        self.rabbitmq: str | None = base.get("BROKER_URL") or None  # the URL it was given
        if self.rabbitmq is not None:  # RabbitMQ has no namespace: a vhost per stack
            base["BROKER_URL"] = create_vhost(self.rabbitmq, self.namespace)
        self.env = procfile_environment(base, self.portal_url)
        self.started: list[ProcfileProcess] = []

    def start(self, name: str) -> ProcfileProcess:
        index = list(self.commands).index(name)
        env = {**self.env, "PORT": str(self.web_port + HONCHO_PORT_STEP * index)}
        number = sum(1 for p in self.started if p.name == name) + 1
        log = self.logs / f"{name}.{number}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(["/bin/sh", "-c", self.commands[name]], cwd=ROOT, env=env,
                                       stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        started = ProcfileProcess(name, process, log)
        self.started.append(started)
        return started

    def start_all(self) -> ProcfileStack:
        """Every Procfile line once, as `tocsin up` runs them; returns when the web answers."""
        for name in self.commands:
            self.start(name)
        wait_until(self.web_is_up, "the web process to answer", WAIT_LIMIT * 2)
        return self

    def line(self, name: str) -> ProcfileProcess:
        [only] = [p for p in self.started if p.name == name and p.running()]
        return only

    def web_is_up(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.portal_url}/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def output(self, name: str) -> str:
        return "\n".join(p.output() for p in self.started if p.name == name)

    def sweeps_done(self, count: int) -> None:
        """Wait until the clocks have enqueued ``count`` more sweeps and no sweep message is
        left unprocessed: the running system has swept at least that many times."""
        enough = self.output("clock").count("sweep enqueued") + count
        wait_until(lambda: self.output("clock").count("sweep enqueued") >= enough,
                   f"{count} more sweeps enqueued", WAIT_LIMIT * 2)
        if self.rabbitmq is None:
            self._sweep_messages_processed()
        else:
            self._tenants_swept_since_now()

    def _sweep_messages_processed(self) -> None:
        """The Redis broker keeps a message in ``queue.msgs`` until a worker acknowledges it."""
        import redis

        from tocsin.core.settings import load_settings

        client = redis.Redis.from_url(load_settings().redis_url)
        queues = [f"{self.namespace}:sweep.msgs", f"{self.namespace}:sweep.DQ.msgs"]
        wait_until(lambda: not any(client.hlen(q) for q in queues), "the sweeps to be processed",
                   WAIT_LIMIT * 2)
        client.close()

    def _tenants_swept_since_now(self) -> None:
        """RabbitMQ does not count the messages a worker holds, so read the outcome instead:
        every active tenant has a sweep completed after this moment (one that began at the
        latest with the last sweep counted)."""
        from db.platform.pool import connection

        def every_tenant_swept_since(moment: object) -> bool:
            with connection() as conn:
                row = conn.execute(
                    "SELECT count(*) FROM control.tenants t WHERE t.status = 'active' AND NOT EXISTS "
                    "(SELECT 1 FROM control.completed_runs r WHERE r.tenant_id = t.id "
                    "AND r.kind = 'sweep' AND r.completed_at > %s)", [moment]).fetchone()
            return row is not None and row[0] == 0

        with connection() as conn:
            row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        wait_until(lambda: every_tenant_swept_since(row[0]), "every tenant to be swept again",
                   WAIT_LIMIT * 2)

    def close(self) -> None:
        """Stop every line (SIGCONT first: a stopped process cannot act on SIGTERM), then
        kill whatever of the stack is left, orphans included."""
        mine = processes_with_environment("DRAMATIQ_NAMESPACE", self.namespace)
        _signal(mine, signal.SIGCONT)
        for p in self.started:
            if p.running():
                p.send(signal.SIGTERM)
        deadline = time.monotonic() + STOP_LIMIT / 2
        while time.monotonic() < deadline and processes_with_environment("DRAMATIQ_NAMESPACE",
                                                                          self.namespace):
            time.sleep(0.2)
        _signal(processes_with_environment("DRAMATIQ_NAMESPACE", self.namespace), signal.SIGKILL)
        for p in self.started:
            if p.process.poll() is None:
                p.process.kill()
            p.process.wait(timeout=STOP_LIMIT)
        if self.rabbitmq is not None:
            delete_vhost(self.rabbitmq, self.namespace)
