"""PgBouncer in transaction pooling mode in front of the test PostgreSQL (`make test-pgbouncer`):
Debian's `pgbouncer`, started by the test process on a free port with a configuration of its
own, every database of the server reachable through it (so each xdist worker's database is).

What goes through it: DATABASE_URL (the pools of every process, the Procfile's included).
What does not: DATABASE_LISTEN_URL, the clock's LISTEN for hosts' commits (a LISTEN holds a
session, which transaction pooling does not keep), set here to the direct URL. PgBouncer
1.18 (Debian 12) does not carry prepared statements across transactions, so
DATABASE_PREPARED_STATEMENTS is off through it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

__all__ = ["PGBOUNCER", "PortTaken", "RunningPgBouncer", "start_pgbouncer"]

PGBOUNCER = "/usr/sbin/pgbouncer"
START_LIMIT = 30.0  # seconds PgBouncer may take to accept connections


@dataclass
class RunningPgBouncer:
    process: subprocess.Popen[bytes]
    url: str  # the given URL with PgBouncer's address instead of the server's
    home: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_address(direct_url: str) -> tuple[str, str, str]:
    """(host or socket directory, port, user) of the server a libpq URL names."""
    parts = urlsplit(direct_url)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or "127.0.0.1"])[0]
    port = query.get("port", [str(parts.port or 5432)])[0]
    return host, port, parts.username or "postgres"


def start_pgbouncer(direct_url: str, home: Path) -> RunningPgBouncer:
    """PgBouncer on a free 127.0.0.1 port in front of the server ``direct_url`` names, in
    transaction pooling mode; its files under ``home``. Another process may take the free
    port before PgBouncer binds it: then again on another."""
    for attempt in range(3):
        try:
            return _start(direct_url, home)
        except PortTaken:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


class PortTaken(RuntimeError):
    pass


def _start(direct_url: str, home: Path) -> RunningPgBouncer:
    if not os.path.exists(PGBOUNCER):
        raise RuntimeError("make test-pgbouncer needs Debian's pgbouncer: apt-get install pgbouncer")
    host, port, user = _server_address(direct_url)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    home.chmod(0o755)
    listen = _free_port()
    auth = home / "userlist.txt"
    auth.write_text(f'"{user}" ""\n')
    ini = home / "pgbouncer.ini"
    ini.write_text(f"""[databases]
* = host={host} port={port} user={user}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {auth}
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 40
max_db_connections = 60
server_reset_query =
ignore_startup_parameters = extra_float_digits,options
server_login_retry = 1
log_connections = 0
log_disconnections = 0
""")
    for f in (auth, ini):
        f.chmod(0o644)
    # PgBouncer refuses to run as root. As another user it needs nothing here but to read,
    # and the server's socket: the user that owns the socket's directory (the embedded
    # server's own, pgserver's, whose data directory holds the socket).
    command = [PGBOUNCER, ini.as_posix()]
    if os.geteuid() == 0:
        owner = pwd.getpwuid(os.stat(host).st_uid).pw_name if os.path.isdir(host) else "nobody"
        command[1:1] = ["-u", owner if owner != "root" else "nobody"]
    with (home / "pgbouncer.log").open("wb") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    parts = urlsplit(direct_url)
    path_and_query = parts._replace(netloc=f"{user}@127.0.0.1:{listen}", query="")
    url = urlunsplit(path_and_query)
    running = RunningPgBouncer(process, url, home)
    deadline = time.monotonic() + START_LIMIT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = (home / "pgbouncer.log").read_text()[-2000:]
            raise (PortTaken if "Address already in use" in said else RuntimeError)(
                f"pgbouncer exited: {said}")
        try:
            with socket.create_connection(("127.0.0.1", listen), timeout=1):
                return running
        except OSError:
            time.sleep(0.1)
    running.stop()
    raise RuntimeError(f"pgbouncer did not listen on 127.0.0.1:{listen} within {START_LIMIT:g}s")
