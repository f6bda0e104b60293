"""Webhook delivery through a real worker to a local receiver: figures, not a timed test.

    python -m bench.webhooks [--deliveries 3000] [--processes 1] [--threads 4] [--rate 100]
                             [--rate-seconds 20] [--keep]

Two phases, in the same run, against one receiver on 127.0.0.1 (a threaded HTTP server in a
process of its own that answers 204 and notes when each webhook-id arrived):

  throughput  ``--deliveries`` due test events of one endpoint, committed set-based, handed
              to the worker as a committed transaction hands them over (one deliver_webhooks
              message per 20); the worker started as the Procfile does (``tocsin worker
              --processes P --threads T``). Deliveries/s = deliveries / (last answer recorded
              - first claim), both read from PostgreSQL. Against it, in the same run, the
              ceiling: a bare httpx loop (P processes x T threads, one client each) posting
              the same body to the same receiver, no signature, no database. The ratio is
              the goal (>= 0.5).
  latency     ``--rate`` test events per second for ``--rate-seconds``, each committed in a
              transaction of its own that enqueues it after commit (as a claim's notices
              do); p50/p99 from the row's commit to the receiver's receipt (goal p99 < 1 s).

Every delivery must arrive exactly once and be delivered with one attempt; any difference
fails the bench (exit 1). The load average is printed with each phase: other work running on
the machine moves the absolute figures, less the ratio measured in the same run.

DATABASE_URL / REDIS_URL name the services; when either is unset the embedded ones are
started under .tocsin/bench. The bench tenant (bench-webhooks-1) is dropped at the end
unless --keep.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SLUG = "bench-webhooks-1"
LOGS = Path(".tocsin/bench/webhooks")
MESSAGE_SIZE = 20  # deliveries per deliver_webhooks message (actors/webhooks.py)
PRODUCERS = 4  # threads committing the latency run's events, each its own transactions
WAIT_LIMIT = 600.0  # seconds a phase may take before the bench gives up


def say(text: str = "") -> None:
    print(text, flush=True)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# --- the receiver (a process of its own) ---------------------------------------------------

def _serve(port_out: Any, stop: Any, received: Any) -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real receiver behind a proxy

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            received.put((self.headers.get("webhook-id", ""), time.time()))
            self.send_response(204)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port_out.put(server.server_address[1])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stop.wait()
    server.shutdown()


class Receiver:
    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        port: Any = ctx.Queue()
        self.received: Any = ctx.Queue()
        self.stop_event = ctx.Event()
        self.process = ctx.Process(target=_serve, args=(port, self.stop_event, self.received), daemon=True)
        self.process.start()
        self.port = int(port.get(timeout=30))
        self.url = f"http://127.0.0.1:{self.port}/hooks"
        self.arrivals: list[tuple[str, float]] = []

    def drain(self) -> list[tuple[str, float]]:
        while True:
            try:
                self.arrivals.append(self.received.get(timeout=0.05))
            except Exception:  # queue.Empty
                return list(self.arrivals)

    def reset(self) -> None:
        self.drain()
        self.arrivals.clear()

    def stop(self) -> None:
        self.stop_event.set()
        self.process.join(timeout=10)


# --- the ceiling: a bare httpx loop --------------------------------------------------------

def _bare_sender(url: str, count: int, threads: int, go: Any, done: Any) -> None:
    import httpx

    body = json.dumps({"type": "webhook.test", "timestamp": "2026-01-01T00:00:00+00:00",
                       "data": {"message": "bench"}}).encode()

    def send(n: int) -> None:
        with httpx.Client(timeout=10, trust_env=False) as client:
            for i in range(count // threads + (1 if n < count % threads else 0)):
                client.post(url, content=body, headers={"content-type": "application/json",
                                                        "webhook-id": f"bare_{os.getpid()}_{n}_{i}"})

    go.wait()
    workers = [threading.Thread(target=send, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done.put(os.getpid())


def bare_ceiling(receiver: Receiver, count: int, processes: int, threads: int) -> float:
    receiver.reset()
    ctx = multiprocessing.get_context("spawn")
    go, done = ctx.Event(), ctx.Queue()
    senders = [ctx.Process(target=_bare_sender,
                           args=(receiver.url, count // processes + (1 if p < count % processes else 0),
                                 threads, go, done)) for p in range(processes)]
    for s in senders:
        s.start()
    time.sleep(1.0)  # the processes import httpx before the clock starts
    started = time.monotonic()
    go.set()
    for _ in senders:
        done.get(timeout=WAIT_LIMIT)
    elapsed = time.monotonic() - started
    for s in senders:
        s.join()
    arrived = len(receiver.drain())
    if arrived != count:
        raise SystemExit(f"the bare loop sent {count} but the receiver got {arrived}")
    return count / elapsed


# --- Tocsin's worker -----------------------------------------------------------------------

def start_worker(processes: int, threads: int, log: Path) -> subprocess.Popen[bytes]:
    tocsin = str(Path(sys.executable).with_name("tocsin"))
    env = {**os.environ, "WEBHOOK_ALLOW_PRIVATE": "1", "PYTHONUNBUFFERED": "1"}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        return subprocess.Popen([tocsin, "worker", "--processes", str(processes), "--threads", str(threads)],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop_worker(process: subprocess.Popen[bytes]) -> None:
    import signal

    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _query(sql_text: str, *params: object) -> list[tuple[Any, ...]]:
    from db.platform.tenancy import tenant_tx

    with tenant_tx(SLUG) as tx:
        return list(tx.conn.execute(sql_text, list(params)).fetchall())


def _empty() -> None:
    from db.platform.tenancy import tenant_tx

    with tenant_tx(SLUG) as tx:
        tx.conn.execute("DELETE FROM webhook_attempts")
        tx.conn.execute("DELETE FROM webhook_deliveries")


def _wait_delivered(count: int, what: str, worker: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + WAIT_LIMIT
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise SystemExit(f"the worker exited; see {LOGS}")
        [(done,)] = _query("SELECT count(*) FROM webhook_deliveries WHERE status = 'delivered'")
        if int(done) >= count:
            return
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def check_exactly_once(receiver: Receiver, expected: int) -> list[tuple[str, float]]:
    arrivals = receiver.drain()
    ids = [a[0] for a in arrivals]
    [(delivered, attempts)] = _query(
        "SELECT count(*) FILTER (WHERE status = 'delivered'), coalesce(sum(attempts), 0) "
        "FROM webhook_deliveries")
    problems = []
    if len(ids) != expected or len(set(ids)) != expected:
        problems.append(f"the receiver got {len(ids)} calls for {len(set(ids))} ids, expected {expected}")
    if int(delivered) != expected or int(attempts) != expected:
        problems.append(f"{delivered} delivered with {attempts} attempts, expected {expected} of each")
    if problems:
        raise SystemExit("; ".join(problems))
    return arrivals


def throughput(receiver: Receiver, endpoint_id: int, count: int, processes: int, threads: int) -> float:
    from actors.webhooks import send_webhooks

    _empty()
    body = json.dumps({"type": "webhook.test", "timestamp": "2026-01-01T00:00:00+00:00",
                       "data": {"message": "bench"}})
    ids = [int(r[0]) for r in _query(
        "INSERT INTO webhook_deliveries (endpoint_id, event_kind, payload, enqueued_at) "
        "SELECT %s, 'webhook.test', %s::jsonb, now() FROM generate_series(1, %s) RETURNING id",
        endpoint_id, body, count)]
    worker = start_worker(processes, threads, LOGS / f"worker-{processes}x{threads}.log")
    try:
        time.sleep(3.0)  # the worker's processes start before the messages arrive
        send_webhooks(SLUG, ids)
        _wait_delivered(count, "the throughput run", worker)
    finally:
        stop_worker(worker)
    check_exactly_once(receiver, count)
    [(first, last)] = _query("SELECT min(started_at), max(ended_at) FROM webhook_attempts")
    return float(count / (last - first).total_seconds())


def latency(receiver: Receiver, endpoint_id: int, rate: float, seconds: float, processes: int,
            threads: int) -> tuple[float, float, float, int]:
    from db.delivery.webhook_deliveries import queue_test_event
    from db.platform.tenancy import tenant_tx

    _empty()
    receiver.reset()
    worker = start_worker(processes, threads, LOGS / "worker-latency.log")
    count = int(rate * seconds)
    try:
        time.sleep(3.0)
        started = time.monotonic()

        def produce(first: int) -> None:
            # Event n is due at started + n / rate; PRODUCERS threads take every PRODUCERS-th
            # one, so a slow commit delays only its own thread's next event.
            for n in range(first, count, PRODUCERS):
                pause = started + n / rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                with tenant_tx(SLUG) as tx:
                    queue_test_event(tx, endpoint_id, "bench")

        producers = [threading.Thread(target=produce, args=(p,)) for p in range(PRODUCERS)]
        for t in producers:
            t.start()
        for t in producers:
            t.join()
        offered = count / (time.monotonic() - started)
        _wait_delivered(count, "the latency run", worker)
    finally:
        stop_worker(worker)
    arrivals = dict(check_exactly_once(receiver, count))
    created = {f"tocsin_{SLUG}_{int(r[0])}": r[1].timestamp()
               for r in _query("SELECT id, created_at FROM webhook_deliveries")}
    waits = sorted(arrivals[k] - created[k] for k in created)
    return offered, waits[len(waits) // 2], waits[min(len(waits) - 1, int(len(waits) * 0.99))], count


def drop_tenant(slug: str) -> None:
    """The bench tenant's schema and control rows (only this bench's slug)."""
    from db.platform.migrations import drop_schema
    from db.platform.pool import connection

    with connection() as conn, conn.transaction():
        for tenant_id, schema in conn.execute("SELECT id, schema_name FROM control.tenants WHERE slug = %s",
                                              [slug]).fetchall():
            drop_schema(conn, str(schema))
            conn.execute("DELETE FROM control.schema_migrations WHERE schema_name = %s", [schema])
            conn.execute("DELETE FROM control.completed_runs WHERE tenant_id = %s", [tenant_id])
            conn.execute("DELETE FROM control.tenants WHERE id = %s", [tenant_id])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--deliveries", type=int, default=3000)
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--rate-seconds", type=float, default=20.0)
    p.add_argument("--keep", action="store_true")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from bench.services import bench_services

    with bench_services(say):
        from db.delivery.webhook_endpoints import create_endpoint
        from db.platform.migrations import migrate_all
        from db.platform.tenancy import create_tenant, list_tenants, tenant_tx
        from tocsin import boot
        from tocsin.core.settings import load_settings

        os.environ["WEBHOOK_ALLOW_PRIVATE"] = "1"
        os.environ.setdefault("SESSION_SECRET", secrets.token_urlsafe(48))  # the worker refuses the default
        settings = boot.start(load_settings())
        boot.start_messaging(settings)
        migrate_all()
        if any(t.slug == SLUG for t in list_tenants()):
            drop_tenant(SLUG)
        create_tenant(SLUG, "Webhooks bench", "UTC")
        receiver = Receiver()
        try:
            with tenant_tx(SLUG) as tx:
                endpoint = create_endpoint(tx, receiver.url, ["webhook.test"], allow_private=True)
            say(f"Webhooks bench: receiver {receiver.url}; load {load()}")
            rate = throughput(receiver, endpoint.id, args.deliveries, args.processes, args.threads)
            say(f"  Tocsin (tocsin worker --processes {args.processes} --threads {args.threads}): "
                f"{rate:,.0f} deliveries/s, each delivered once; load {load()}")
            bare = bare_ceiling(receiver, args.deliveries, args.processes, args.threads)
            say(f"  bare httpx loop ({args.processes} x {args.threads} threads): {bare:,.0f} posts/s; "
                f"load {load()}")
            ratio = rate / bare
            say(f"  ratio {ratio:.2f} (goal >= 0.5): {'met' if ratio >= 0.5 else 'NOT met'}")
            offered, p50, p99, count = latency(receiver, endpoint.id, args.rate, args.rate_seconds,
                                               args.processes, args.threads)
            say(f"  latency at {offered:.0f}/s ({count} events): commit -> receipt p50 {p50 * 1000:.0f} ms, "
                f"p99 {p99 * 1000:.0f} ms (goal p99 < 1 s: {'met' if p99 < 1 else 'NOT met'}); load {load()}")
        finally:
            receiver.stop()
            if not args.keep:
                drop_tenant(SLUG)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
