"""The services a benchmark runs against: the ones the environment names, else embedded
ones under .tocsin/bench (started here, stopped when the benchmark ends)."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCH_HOME = Path(".tocsin/bench")


@contextmanager
def bench_services(say: Callable[[str], None], *, quiet: bool = False) -> Iterator[bool]:
    """Start what DATABASE_URL / REDIS_URL do not name, give this run its own Dramatiq
    namespace (set before the broker is installed: nothing leaks into other queues), and
    on the way out close the pool and stop what was started. Yields whether PostgreSQL is
    the embedded one. No mail is sent, so no local SES endpoint is started: start_embedded
    is told one exists (in the copy it reads; nothing is exported)."""
    stop: Callable[[], None] | None = None
    embedded = not os.environ.get("DATABASE_URL")
    if embedded or not os.environ.get("REDIS_URL"):
        from tocsin.shell.services import start_embedded

        wanted = dict(os.environ)
        wanted.setdefault("SES_ENDPOINT_URL", "http://127.0.0.1:9")
        # Absolute: Redis resolves its --logfile after changing into its --dir.
        services = start_embedded(BENCH_HOME.resolve(), wanted)
        os.environ.update(services.env)
        if not quiet:
            for line in services.started:
                say(f"started {line}")
        stop = services.stop
    os.environ["DRAMATIQ_NAMESPACE"] = f"tocsin-bench-{uuid.uuid4().hex[:8]}"
    try:
        yield embedded
    finally:
        from db.platform.pool import close_pool

        close_pool()
        if stop is not None:
            stop()


START_LIMIT = 60.0  # seconds a started portal may take to answer /readyz


def wait_ready(server: subprocess.Popen[bytes], port: int, log: Path) -> subprocess.Popen[bytes]:
    """Return ``server`` once the portal it runs answers /readyz; stop the benchmark (with
    where to look) if it exits first or does not answer within START_LIMIT."""
    deadline = time.monotonic() + START_LIMIT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the portal exited at start-up; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return server
        except OSError:
            time.sleep(0.2)
    server.terminate()
    raise SystemExit(f"the portal did not answer /readyz within {START_LIMIT:.0f} s; see {log}")


def drop_tenant(conn: Any, slug: str) -> None:
    """Remove a benchmark's tenant, if a previous run left it: its schema, migration records,
    API keys and row, in one transaction."""
    from db.platform.migrations import drop_schema

    with conn.transaction():
        row = conn.execute("SELECT id, schema_name FROM control.tenants WHERE slug = %s", [slug]).fetchone()
        if row is not None:
            drop_schema(conn, str(row[1]))
            conn.execute("DELETE FROM control.schema_migrations WHERE schema_name = %s", [row[1]])
            conn.execute("DELETE FROM control.api_keys WHERE tenant_id = %s", [row[0]])
            conn.execute("DELETE FROM control.tenants WHERE id = %s", [row[0]])

