"""The portal served by uvicorn in a subprocess, as in production, against the test database
and Redis: for the browser tests and for the event stream, which the in-process test client
cannot read while it is still open."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.integration.conftest import WAIT_LIMIT, wait_until
from tests.support.procfile_stack import listens_on
from tocsin.boot.web import WEB_GRACEFUL_SHUTDOWN

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


@contextmanager
def serve_portal(log_path: Path, *, as_procfile: bool = False, **settings: str) -> Iterator[str]:
    """Start the portal with these extra settings (e.g. INBOX_POLL_SECONDS="5"); the URL it
    listens on (PORTAL_URL may name another, as behind a TLS-terminating proxy). Served by
    uvicorn's factory, or with ``as_procfile`` by `tocsin web`, the Procfile's command."""
    with portal_process(log_path, as_procfile=as_procfile, **settings) as (url, _):
        yield url


@contextmanager
def portal_process(log_path: Path, *, as_procfile: bool = False,
                   **settings: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """serve_portal, with the process itself (for a test that kills it)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PORT": str(port), "PORTAL_URL": url, **settings}
    command = [sys.executable, "-m", "tocsin.boot.cli", "web"] if as_procfile else [
        sys.executable, "-m", "uvicorn", "tocsin.boot.web:app", "--factory",
        "--host", "127.0.0.1", "--port", str(port), "--no-proxy-headers",  # as `tocsin web`
        "--timeout-graceful-shutdown", str(WEB_GRACEFUL_SHUTDOWN)]
    log_path.parent.mkdir(exist_ok=True)
    with log_path.open("wb") as log:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            # Healthy and listening itself: under pytest-xdist another worker's portal may
            # have taken the port first and would answer for this one.
            wait_until(lambda: server.poll() is not None
                       or (_healthy(url) and listens_on(port, server.pid)), "the portal to start")
            if server.poll() is not None:
                raise AssertionError(f"the portal exited at start-up; see {log_path}")
            yield url, server
        finally:
            if server.poll() is None:
                server.terminate()
            try:
                server.wait(timeout=WAIT_LIMIT)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
