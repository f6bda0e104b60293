"""Intake throughput: events/s through the batch events API vs. a raw INSERT of the same
rows, in the same run. Figures, not a timed test.

    python -m bench.events_intake [--events 20000] [--concurrency 4]

The portal is started as the Procfile's `tocsin web` starts it (one uvicorn process), and
``--concurrency`` clients send batches of 500 events (each creating a case with three
fields, an assignee and a region) over HTTP with an API key. The raw ceiling then inserts
the very rows the API wrote (executemany, pipelined, 500 rows a transaction) from as many
connections. Goal: the API reaches at least 0.3 of the raw ceiling.

DATABASE_URL / REDIS_URL name the services; when either is unset the embedded ones are
started under .tocsin/bench. The bench tenant (``bench-intake``) is dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.services import bench_services, drop_tenant, wait_ready

SLUG = "bench-intake"
BATCH = 500  # events per request: the API's limit
GOAL_SHARE = 0.30  # API events/s as a share of the raw INSERT's


def say(text: str = "") -> None:
    print(text, flush=True)


@dataclass(frozen=True)
class IntakeFigures:
    events: int
    api_per_second: float
    raw_per_second: float

    @property
    def share(self) -> float:
        return self.api_per_second / self.raw_per_second if self.raw_per_second else 0.0


def _build() -> tuple[str, str]:
    """The tenant, its fraud product, people and regions; the schema and an API key."""
    from db.events.api_keys import create_api_key
    from db.events.products import add_unit, create_product
    from db.platform.tenancy import create_tenant, tenant_tx

    tenant = create_tenant(SLUG, "Bench Intake", "Europe/London")
    with tenant_tx(SLUG) as tx:
        create_product(tx, "fraud", "Fraud cases", ("case",))
        tx.conn.execute("INSERT INTO users (email, role) "
                        "SELECT 'analyst' || g || '@bench.example', 'member' FROM generate_series(1, 20) g")
        for region in ("north", "south", "east", "west"):
            add_unit(tx, "region", region, region.title())
    return tenant.schema, create_api_key(SLUG, "bench")[1]


def _event(n: int) -> dict[str, Any]:
    return {"product": "fraud", "type": "created",
            "subject": {"kind": "case", "external_id": f"C-{n}", "title": f"Case {n}", "status": "open",
                        "assignees": [f"analyst{n % 20 + 1}@bench.example"],
                        "hierarchy": {"region": ("north", "south", "east", "west")[n % 4]},
                        "fields": {"amount": n * 37 % 2_000_000, "currency": "EUR", "channel": "card"}},
            "metadata": {"source": "bench"}}


def _start_portal(port: int, log: Path) -> subprocess.Popen[bytes]:
    """`tocsin web`, as the Procfile runs it, with a rate limit the bench cannot reach."""
    env = {**os.environ, "PORT": str(port), "PORTAL_URL": f"http://127.0.0.1:{port}",
           "API_EVENTS_PER_MINUTE": str(10**9), "API_TENANT_EVENTS_PER_MINUTE": str(10**9),
           # `tocsin web` refuses the published default secret, as a deployment must
           "SESSION_SECRET": os.environ.get("SESSION_SECRET") or secrets.token_urlsafe(48)}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as handle:
        server = subprocess.Popen([sys.executable, "-m", "tocsin.boot.cli", "web"], env=env, stdout=handle,
                                  stderr=subprocess.STDOUT)
    return wait_ready(server, port, log)


def _in_parallel(jobs: list[Callable[[], None]]) -> float:
    """Run the jobs in threads; seconds from start to the last one's end."""
    errors: list[BaseException] = []

    def run(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def _through_api(base: str, key: str, n: int, concurrency: int, first: int = 0) -> float:
    from tocsin.shell.client import TocsinClient

    batches = [[_event(first + i) for i in range(start, min(start + BATCH, n))]
               for start in range(0, n, BATCH)]

    def sender(lane: int) -> Callable[[], None]:
        def send() -> None:
            with TocsinClient(base, key, timeout=120) as client:
                for batch in batches[lane::concurrency]:
                    client.send_batch(batch)
        return send

    return _in_parallel([sender(lane) for lane in range(concurrency)])


_COLUMNS = "product, subject_id, event_type, trigger_type, changes, metadata, occurred_at, source"


def _raw_insert(database_url: str, schema: str, concurrency: int, after_id: int) -> tuple[int, float]:
    """The rows the API wrote (ids above ``after_id``), inserted again as they are: (rows, seconds)."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(f'SELECT {_COLUMNS} FROM "{schema}".events WHERE id > %s ORDER BY id',
                            [after_id]).fetchall()
    statement = (f'INSERT INTO "{schema}".events ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)')
    chunks = [rows[i:i + BATCH] for i in range(0, len(rows), BATCH)]
    from psycopg.types.json import Jsonb

    prepared = [[(r[0], r[1], r[2], r[3], Jsonb(r[4]), Jsonb(r[5]), r[6], r[7]) for r in chunk]
                for chunk in chunks]
    connections = [psycopg.connect(database_url) for _ in range(concurrency)]

    def inserter(lane: int) -> Callable[[], None]:
        def insert() -> None:
            conn = connections[lane]
            for chunk in prepared[lane::concurrency]:
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(statement, chunk)  # pipelined by psycopg
        return insert

    try:
        return len(rows), _in_parallel([inserter(lane) for lane in range(concurrency)])
    finally:
        for conn in connections:
            conn.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure_intake(say: Callable[[str], None], n: int, concurrency: int = 4) -> IntakeFigures:
    """Events/s through the batch API and by raw INSERT of the same rows, in one run, against
    the services the environment names (bench.events calls this inside its services)."""
    from db.platform.migrations import migrate_all
    from tocsin.core.settings import load_settings

    settings = load_settings()
    migrate_all()
    conn = psycopg.connect(settings.database_url, autocommit=True)
    server = None
    try:
        drop_tenant(conn, SLUG)
        schema, key = _build()
        port = _free_port()
        server = _start_portal(port, Path(".tocsin/bench").resolve() / "intake-portal.log")
        base = f"http://127.0.0.1:{port}"
        _through_api(base, key, BATCH, 1, first=-BATCH)  # warm-up: imports, first connections
        row = conn.execute(f'SELECT coalesce(max(id), 0) FROM "{schema}".events').fetchone()
        after_id = int(row[0]) if row else 0
        say(f"intake: {n:,} events through POST /api/v1/events/batch ({BATCH} a request, "
            f"{concurrency} clients, `tocsin web`) ...")
        api_seconds = _through_api(base, key, n, concurrency)
        api_rate = n / api_seconds
        say(f"  API:        {api_rate:10,.0f} events/s  ({api_seconds:.2f} s)")
        say(f"intake: the same rows by raw INSERT (executemany, {BATCH} a transaction, "
            f"{concurrency} connections) ...")
        rows, raw_seconds = _raw_insert(settings.database_url, schema, concurrency, after_id)
        raw_rate = rows / raw_seconds
        say(f"  raw INSERT: {raw_rate:10,.0f} events/s  ({raw_seconds:.2f} s)")
        figures = IntakeFigures(n, api_rate, raw_rate)
        verdict = "met" if figures.share >= GOAL_SHARE else "NOT met"
        say(f"  API / raw = {figures.share:.2f} (goal >= {GOAL_SHARE:.2f}: {verdict})")
        return figures
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        drop_tenant(conn, SLUG)
        conn.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=4, help="API clients and raw connections")
    args = parser.parse_args(argv)
    with bench_services(say):
        measure_intake(say, args.events, args.concurrency)


if __name__ == "__main__":
    main()
