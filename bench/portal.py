"""Portal read throughput under concurrent pollers: figures, not a timed test.

    python -m bench.portal [--users 10000] [--notifications 1000000] [--concurrency 200]
                           [--seconds 10] [--server-workers CPUS] [--server uvicorn] [--keep]

Builds one bench tenant (slug ``bench-portal``) with ``--users`` team members and
``--notifications`` notifications spread evenly over them (about a third unread, spanning a
year), signs ``--concurrency`` distinct users in over HTTP, serves the portal with uvicorn
(``--server-workers`` processes, as production would) and drives it with ``--concurrency``
keep-alive connections, one signed-in user each, for ``--seconds`` per phase:

  static  GET /static/tocsin.css          the ceiling: no session, no database
  badge   GET /inbox/badge  (htmx)        the unread count every open page polls for
  feed    GET /inbox/feed?... (htmx)      the second page of a user's feed
  inbox   GET /                           the whole inbox page

back to back (saturation), then ``--concurrency`` pollers each asking for the badge every
``--poll-interval`` seconds (as open pages do, at 30 times the portal's default rate). It
prints requests/s, p50 and p99 latency for each, the badge's share of the static ceiling
and whether the goals are met (saturated badge >= 30% of static; badge p99 < 50 ms with
the pollers). The load
generator is a small asyncio HTTP/1.1 client in this process, on the same machine: its own
CPU use is part of every figure alike.

DATABASE_URL / REDIS_URL name the services; when either is unset the embedded ones are
started under .tocsin/bench. The bench tenant is suspended-proof (no client has a licence,
so a scan finds nothing) and dropped at the end unless --keep.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import random
import re
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.services import bench_services, drop_tenant, wait_ready

SLUG = "bench-portal"
PASSWORD = "bench portal password"
GOAL_BADGE_SHARE = 0.30  # badge requests/s as a share of the static ceiling
GOAL_BADGE_P99_MS = 50.0  # milliseconds


def say(text: str = "") -> None:
    print(text, flush=True)


# -- data --------------------------------------------------------------------------------


def build(conn: psycopg.Connection[Any], users: int, notifications: int) -> str:
    """The tenant, its users (one shared password hash) and the notifications, set-based."""
    from argon2 import PasswordHasher

    from db.platform.tenancy import create_tenant

    tenant = create_tenant(SLUG, "Bench Portal", "Europe/London")
    password_hash = PasswordHasher().hash(PASSWORD)
    schema = tenant.schema
    with conn.transaction():
        conn.execute("SELECT set_config('search_path', %s, true)", [f"{schema}, public"])
        conn.execute(
            "INSERT INTO users (email, display_name, role, password_hash) "
            "SELECT 'user' || g || '@bench.example', 'Bench user ' || g, 'member', %s "
            "FROM generate_series(1, %s) AS g",
            [password_hash, users],
        )
    with conn.transaction():
        conn.execute("SELECT set_config('search_path', %s, true)", [f"{schema}, public"])
        conn.execute(
            """
            INSERT INTO notifications (recipient_user_id, category, title, body, data, idempotency_key,
                                       created_at, read_at)
            SELECT u.first_id + (g %% %(users)s), 'report_ready', 'Report ' || g || ' is ready',
                   'The report you asked for is ready to read.', '{"href": "/"}', 'bench:' || g,
                   now() - make_interval(secs => g * 31536000.0 / %(total)s),
                   CASE WHEN g %% 3 = 0 THEN NULL ELSE now() END
            FROM generate_series(1, %(total)s) AS g, (SELECT min(id) AS first_id FROM users) u
            """,
            {"users": users, "total": notifications},
        )
        conn.execute("ANALYZE users")
        conn.execute("ANALYZE notifications")
    return schema


def feed_cursors(conn: psycopg.Connection[Any], schema: str, user_ids: list[int]) -> dict[int, str]:
    """Each user's cursor after the first page (the 20th item), as the page's link has it."""
    from urllib.parse import urlencode

    from db.delivery.inbox import PAGE_SIZE

    with conn.transaction():
        conn.execute("SELECT set_config('search_path', %s, true)", [f"{schema}, public"])
        rows = conn.execute(
            """
            SELECT u, c.created_at, c.id FROM unnest(%s::bigint[]) AS u,
            LATERAL (SELECT created_at, id FROM notifications WHERE recipient_user_id = u
                     AND archived_at IS NULL ORDER BY created_at DESC, id DESC
                     OFFSET %s LIMIT 1) c
            """,
            [user_ids, PAGE_SIZE - 1],
        ).fetchall()
    return {int(u): urlencode({"created_at": at.isoformat(), "id": i}) for u, at, i in rows}


# -- the server --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SERVERS = ("uvicorn", "granian")


def server_command(server: str, port: int, workers: int) -> list[str]:
    if server == "granian":  # measured against uvicorn (issue 13); not what `tocsin web` runs
        return [sys.executable, "-m", "granian", "--interface", "asgi", "--factory", "--host", "127.0.0.1",
                "--port", str(port), "--workers", str(workers), "--no-access-log", "--log-level", "warning",
                "tocsin.boot.web:app"]
    return [sys.executable, "-m", "uvicorn", "tocsin.boot.web:app", "--factory", "--host", "127.0.0.1",
            "--port", str(port), "--workers", str(workers), "--no-access-log", "--log-level", "warning"]


def start_server(port: int, workers: int, log: Path, server_name: str = "uvicorn",
                 profile: Path | None = None) -> subprocess.Popen[bytes]:
    """The portal in a subprocess, answering /readyz; under cProfile, written to ``profile``
    when it stops, if one is named."""
    env = dict(os.environ, PORTAL_URL=f"http://127.0.0.1:{port}")
    handle = log.open("wb")
    command = server_command(server_name, port, workers)
    if profile is not None:
        command[1:2] = ["-m", "cProfile", "-o", str(profile), "-m"]
    server = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
    return wait_ready(server, port, log)


def sign_in(base: str, email: str) -> str:
    """Sign one user in through the login form; the Cookie header their requests carry."""
    import httpx

    with httpx.Client(base_url=base, follow_redirects=True) as client:
        page = client.get("/login")
        token = re.search(r'name="_csrf_token" value="([^"]+)"', page.text)
        assert token, "no CSRF token on the login page"
        response = client.post("/login", data={"organisation": SLUG, "email": email,
                                               "password": PASSWORD, "_csrf_token": token.group(1)})
        if response.status_code != 200 or "Inbox" not in response.text:
            raise SystemExit(f"signing {email} in failed with {response.status_code}")
        return "; ".join(f"{name}={value}" for name, value in client.cookies.items())


# -- the load generator ------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    name: str
    label: str
    request: Callable[[int], bytes]  # connection number -> raw HTTP request


@dataclass(frozen=True)
class Result:
    label: str
    requests: int
    errors: int
    seconds: float
    latencies: list[float]  # seconds

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * p))] * 1000 if ordered else float("nan")


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    match = re.search(rb"\r\ncontent-length:\s*(\d+)", head, re.IGNORECASE)
    if match is None:
        raise RuntimeError("response without Content-Length")
    await reader.readexactly(int(match.group(1)))
    return status


async def _connection(port: int, number: int, phase: Phase, stop_at: float, latencies: list[float],
                      counts: list[int], interval: float | None) -> None:
    """One keep-alive connection: back-to-back requests (interval None: saturation), or one
    every ``interval`` seconds, starting at a random offset, as an open page polls."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = phase.request(number)
    next_at = time.perf_counter() + (random.random() * interval if interval else 0.0)
    try:
        while True:
            if interval:
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
                next_at += interval
            if time.perf_counter() >= stop_at:
                break
            started = time.perf_counter()
            writer.write(request)
            status = await _read_response(reader)
            latencies.append(time.perf_counter() - started)
            counts[0 if status == 200 else 1] += 1
    finally:
        writer.close()


async def _run_phase(port: int, phase: Phase, concurrency: int, seconds: float,
                     interval: float | None) -> Result:
    latencies: list[float] = []
    counts = [0, 0]
    started = time.perf_counter()
    await asyncio.gather(*(
        _connection(port, n, phase, started + seconds, latencies, counts, interval)
        for n in range(concurrency)
    ))
    return Result(phase.label, counts[0], counts[1], time.perf_counter() - started, latencies)


def run_phase(port: int, phase: Phase, concurrency: int, seconds: float,
              interval: float | None = None) -> Result:
    warm_up = min(2.0, seconds / 5)
    asyncio.run(_run_phase(port, phase, concurrency, warm_up, interval))  # dropped
    return asyncio.run(_run_phase(port, phase, concurrency, seconds, interval))


def http_get(path: str, cookie: str | None = None, htmx: bool = False) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Accept: text/html"]
    if cookie:
        lines.append(f"Cookie: {cookie}")
    if htmx:
        lines += ["HX-Request: true", "HX-Current-URL: http://127.0.0.1/"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# -- report ------------------------------------------------------------------------------


def report(results: list[Result], args: argparse.Namespace) -> None:
    static = next(r for r in results if r.label.startswith("static"))
    badge = next(r for r in results if r.label.startswith("badge"))
    pollers = results[-1]
    say()
    say(f"{'phase':<44} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
    for r in results:
        say(f"{r.label:<44} {r.rate:>9,.0f} {r.percentile(0.50):>8.1f} {r.percentile(0.99):>8.1f} "
            f"{r.errors:>7}")
    share = badge.rate / static.rate
    p99 = pollers.percentile(0.99)
    say()
    say(f"badge / static ceiling, both saturated: {share:.2f} (goal >= {GOAL_BADGE_SHARE:.2f}: "
        f"{'met' if share >= GOAL_BADGE_SHARE else 'NOT met'})")
    say(f"badge p99 with {args.concurrency} pollers every {args.poll_interval:g} s: {p99:.1f} ms "
        f"(goal < {GOAL_BADGE_P99_MS:.0f} ms: {'met' if p99 < GOAL_BADGE_P99_MS else 'NOT met'})")
    say(f"(saturated, {args.concurrency} connections back to back queue by Little's law: "
        f"{args.concurrency} / {badge.rate:,.0f} req/s = {args.concurrency / badge.rate * 1000:.0f} ms "
        "of waiting per request whatever the server does)")
    say()
    say("Markdown for the README:")
    say()
    say("| request | req/s | p50 ms | p99 ms |")
    say("|---|---:|---:|---:|")
    for r in results:
        say(f"| {r.label} | {r.rate:,.0f} | {r.percentile(0.50):.1f} | {r.percentile(0.99):.1f} |")


# -- main --------------------------------------------------------------------------------


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.portal", description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=positive, default=10_000)
    parser.add_argument("--notifications", type=positive, default=1_000_000)
    parser.add_argument("--concurrency", type=positive, default=200,
                        help="concurrent keep-alive connections, one signed-in user each (200)")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per phase (10)")
    parser.add_argument("--poll-interval", type=float, default=1.0,
                        help="seconds between two badge requests of one poller in the latency phase "
                             "(1; the portal's default is 30)")
    parser.add_argument("--server-workers", type=positive, default=os.cpu_count() or 1,
                        help="server worker processes (one per CPU)")
    parser.add_argument("--server", choices=SERVERS, default="uvicorn",
                        help="the ASGI server (uvicorn, as `tocsin web` runs; granian to compare)")
    parser.add_argument("--keep", action="store_true", help="keep the bench tenant afterwards")
    args = parser.parse_args(argv)
    if args.concurrency > args.users:
        parser.error("--concurrency must not exceed --users (one user per connection)")
    if args.server == "granian" and importlib.util.find_spec("granian") is None:
        parser.error("granian is not installed (it is no dependency of Tocsin's): pip install granian")
    return args


def run(args: argparse.Namespace) -> None:
    from db.platform.migrations import migrate_all
    from tocsin.core.settings import load_settings

    settings = load_settings()
    migrate_all()
    conn = psycopg.connect(settings.database_url, autocommit=True)
    server: subprocess.Popen[bytes] | None = None
    try:
        drop_tenant(conn, SLUG)
        say(f"Building {args.users:,} users and {args.notifications:,} notifications ...")
        started = time.perf_counter()
        schema = build(conn, args.users, args.notifications)
        say(f"  built in {time.perf_counter() - started:.1f} s")
        port = free_port()
        log = Path(".tocsin/bench").resolve() / "portal-server.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        say(f"Serving the portal with {args.server}, {args.server_workers} worker process(es) ...")
        server = start_server(port, args.server_workers, log, args.server)
        base = f"http://127.0.0.1:{port}"
        with conn.transaction():
            conn.execute("SELECT set_config('search_path', %s, true)", [f"{schema}, public"])
            users = conn.execute("SELECT id, email FROM users ORDER BY id LIMIT %s",
                                 [args.concurrency]).fetchall()
        say(f"Signing {len(users)} users in through the login form ...")
        cookies = [sign_in(base, str(email)) for _, email in users]
        cursors = feed_cursors(conn, schema, [int(u) for u, _ in users])
        unread = conn.execute(
            f'SELECT avg(c) FROM (SELECT count(*) c FROM "{schema}".notifications '
            "WHERE read_at IS NULL GROUP BY recipient_user_id) s").fetchone()
        say(f"  each user has {args.notifications // args.users} notifications, "
            f"~{float(unread[0] if unread else 0):.0f} unread")
        phases = [
            Phase("static", "static ceiling: GET /static/tocsin.css",
                  lambda n: http_get("/static/tocsin.css")),
            Phase("badge", "badge fragment: GET /inbox/badge",
                  lambda n: http_get("/inbox/badge", cookies[n], htmx=True)),
            Phase("feed", "feed fragment: GET /inbox/feed (page 2)",
                  lambda n: http_get(f"/inbox/feed?{cursors[int(users[n][0])]}", cookies[n], htmx=True)),
            Phase("inbox", "inbox page: GET /", lambda n: http_get("/", cookies[n])),
        ]
        results = []
        for phase in phases:
            say(f"{phase.label}: {args.concurrency} connections, back to back, for {args.seconds:.0f} s ...")
            results.append(run_phase(port, phase, args.concurrency, args.seconds))
        polling = Phase("pollers", f"{args.concurrency} pollers, one badge request each every "
                        f"{args.poll_interval:g} s", phases[1].request)
        say(f"{polling.label}, for {args.seconds:.0f} s ...")
        results.append(run_phase(port, polling, args.concurrency, args.seconds, args.poll_interval))
        report(results, args)
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        if not args.keep:
            drop_tenant(conn, SLUG)
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # The portal refuses the published default secret; a benchmark signs nothing that lasts.
    os.environ.setdefault("SESSION_SECRET", secrets.token_urlsafe(48))
    with bench_services(say, quiet=True):
        run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
