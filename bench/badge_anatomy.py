"""Where one badge request spends its time: figures, not a timed test.

    python -m bench.badge_anatomy [--requests 2000] [--profile FILE]

One signed-in user of a small bench tenant (bench.portal's data: 200 users, 100
notifications each) asks for /inbox/badge ``--requests`` times, one request after the other
on one keep-alive connection, from a portal served by one uvicorn process; the same for the
static file. For each it prints the wall time per request and the CPU each process spent
per request: the portal's, PostgreSQL's backends' and Redis's (read from /proc), so the
CPU one request costs the machine can be set against the static ceiling's.

Then, in this process and one at a time, each piece the badge runs, timed alone: the
session's Redis reads and writes, a bare pool checkout, the guard's tenant transaction
(load_viewer), the handler's (unread_count), both in one (as the badge now reads them),
the fragment's template, a hand-off to a worker
thread and back. Their sum against the request's wall time is what Litestar, uvicorn and
the HTTP parsing cost. With ``--profile`` the portal runs under cProfile and the functions
where its badge requests spent the most time are printed (the static file's requests are
not profiled).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from bench.portal import (
    SLUG,
    _read_response,
    build,
    free_port,
    http_get,
    say,
    sign_in,
    start_server,
)
from bench.services import bench_services, drop_tenant

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # per second, the unit of /proc/<pid>/stat times


def cpu_seconds(pids: Sequence[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLOCK_TICKS


def postgres_backends(conn: psycopg.Connection[Any]) -> list[int]:
    rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' "
                        "AND pid <> pg_backend_pid()").fetchall()
    return [int(r[0]) for r in rows]


def redis_pid(url: str) -> int:
    import redis

    client = redis.Redis.from_url(url)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


async def serial_requests(port: int, request: bytes, count: int) -> float:
    """Seconds per request, one after the other on one keep-alive connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(50):  # warm-up
            writer.write(request)
            await _read_response(reader)
        started = time.perf_counter()
        for _ in range(count):
            writer.write(request)
            status = await _read_response(reader)
            if status != 200:
                raise SystemExit(f"unexpected status {status}")
        return (time.perf_counter() - started) / count
    finally:
        writer.close()


def whole_requests(args: argparse.Namespace, conn: psycopg.Connection[Any], cookie: str, port: int,
                   server_pid: int) -> None:
    from tocsin.core.settings import load_settings

    redis = redis_pid(load_settings().redis_url)
    say(f"{'request, one at a time':<34} {'wall µs':>9} {'portal CPU µs':>14} {'PostgreSQL CPU µs':>18} "
        f"{'Redis CPU µs':>13}")
    for label, request in (("static: GET /static/tocsin.css", http_get("/static/tocsin.css")),
                           ("badge: GET /inbox/badge", http_get("/inbox/badge", cookie, htmx=True))):
        backends = postgres_backends(conn)
        before = (cpu_seconds([server_pid]), cpu_seconds(backends), cpu_seconds([redis]))
        wall = asyncio.run(serial_requests(port, request, args.requests))
        backends = sorted(set(backends) | set(postgres_backends(conn)))
        after = (cpu_seconds([server_pid]), cpu_seconds(backends), cpu_seconds([redis]))
        per = [(a - b) / (args.requests + 50) * 1e6 for a, b in zip(after, before, strict=True)]
        say(f"{label:<34} {wall * 1e6:>9,.0f} {per[0]:>14,.0f} {per[1]:>18,.0f} {per[2]:>13,.0f}")


def timed(label: str, count: int, step: Callable[[], object]) -> float:
    for _ in range(min(50, count)):
        step()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        step()
    wall, cpu = (time.perf_counter() - wall) / count, (time.process_time() - cpu) / count
    say(f"  {label:<58} {wall * 1e6:>9,.0f} {cpu * 1e6:>9,.0f}")
    return wall


async def timed_async(label: str, count: int, step: Callable[[], Awaitable[object]]) -> float:
    for _ in range(min(50, count)):
        await step()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        await step()
    wall, cpu = (time.perf_counter() - wall) / count, (time.process_time() - cpu) / count
    say(f"  {label:<58} {wall * 1e6:>9,.0f} {cpu * 1e6:>9,.0f}")
    return wall


def pieces(args: argparse.Namespace, user_id: int) -> None:
    import anyio.to_thread
    from redis.asyncio import Redis as AsyncRedis

    from db.delivery.inbox import unread_count
    from db.platform.pool import configure_pool, connection
    from db.platform.tenancy import tenant_tx
    from portal.auth import load_viewer, viewer_in
    from portal.templating import build_environment
    from tocsin.core.settings import load_settings

    settings = load_settings()
    configure_pool(settings.database_url)
    environment = build_environment({"app_name": "Tocsin", "poll_seconds": 30, "live_push": True})
    template = environment.get_template("_badge.html")
    count = args.requests

    say(f"  {'piece, alone, one at a time':<58} {'wall µs':>9} {'CPU µs':>9}")

    def checkout() -> None:
        with connection():
            pass

    def empty_transaction() -> None:
        with connection() as conn, conn.transaction():
            pass

    def guard() -> None:
        assert load_viewer(SLUG, user_id) is not None

    def count_unread() -> None:
        with tenant_tx(SLUG) as tx:
            unread_count(tx, user_id)

    def viewer_and_count() -> None:
        with tenant_tx(SLUG) as tx:
            viewer = viewer_in(tx, user_id)
            assert viewer is not None
            unread_count(tx, viewer.user.id)

    timed("pool checkout and return (with its connection check)", count, checkout)
    timed("checkout + BEGIN + COMMIT", count, empty_transaction)
    timed("guard: load_viewer (tenant_tx: tenant, user)", count, guard)
    timed("handler: tenant_tx + unread_count", count, count_unread)
    timed("the badge now: viewer and count in one tenant_tx", count, viewer_and_count)
    timed("template: _badge.html", count, lambda: template.render(unread=42))

    async def in_loop() -> None:
        redis = AsyncRedis.from_url(settings.redis_url)
        key = f"{settings.dramatiq_namespace}:anatomy:{secrets.token_hex(4)}"
        await redis.set(key, '{"tenant": "bench-portal", "user_id": 1, "started": 0}', ex=600)
        await timed_async("session: Redis GET", count, lambda: redis.get(key))
        await timed_async("session: Redis EXPIRE (the refresh)", count, lambda: redis.expire(key, 600))
        await timed_async("hand-off: anyio.to_thread.run_sync(no-op)", count,
                          lambda: anyio.to_thread.run_sync(lambda: None))
        await timed_async("hand-off + guard's transaction", count,
                          lambda: anyio.to_thread.run_sync(guard))
        await timed_async("hand-off + the badge's one transaction", count,
                          lambda: anyio.to_thread.run_sync(viewer_and_count))
        await redis.delete(key)
        await redis.aclose()

    asyncio.run(in_loop())


def profiled(args: argparse.Namespace, port: int, log: Path) -> None:
    import pstats

    server = start_server(port, 1, log, profile=args.profile)
    try:
        cookie = sign_in(f"http://127.0.0.1:{port}", "user1@bench.example")
        asyncio.run(serial_requests(port, http_get("/inbox/badge", cookie, htmx=True), args.requests))
    finally:
        # SIGINT, not SIGTERM: uvicorn raises the signal again once it has stopped, and only
        # a KeyboardInterrupt lets cProfile write its file on the way out.
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
    say(f"The portal under cProfile, {args.requests} badge requests (and one sign-in); "
        "the 40 functions with the most time spent in them and below:")
    pstats.Stats(str(args.profile)).sort_stats("cumulative").print_stats(40)


def run(args: argparse.Namespace) -> None:
    from db.platform.migrations import migrate_all
    from tocsin.core.settings import load_settings

    settings = load_settings()
    migrate_all()
    conn = psycopg.connect(settings.database_url, autocommit=True)
    server = None
    try:
        drop_tenant(conn, SLUG)
        build(conn, 200, 20_000)
        port = free_port()
        log = Path(".tocsin/bench").resolve() / "anatomy-server.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        base = f"http://127.0.0.1:{port}"
        if args.profile is not None:
            profiled(args, port, log)
        server = start_server(port, 1, log)
        cookie = sign_in(base, "user1@bench.example")
        schema = conn.execute("SELECT schema_name FROM control.tenants WHERE slug = %s", [SLUG]).fetchone()
        assert schema is not None
        user = conn.execute(f'SELECT id FROM "{schema[0]}".users WHERE email = %s',
                            ["user1@bench.example"]).fetchone()
        assert user is not None
        say(f"The portal under one client, {args.requests} requests each (uvicorn, 1 process):")
        whole_requests(args, conn, cookie, port, server.pid)
        say()
        say("The badge's pieces, in this process:")
        pieces(args, int(user[0]))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        drop_tenant(conn, SLUG)
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.badge_anatomy", description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--profile", type=Path, help="profile the portal into this file")
    args = parser.parse_args(argv)
    os.environ.setdefault("SESSION_SECRET", secrets.token_urlsafe(48))
    with bench_services(say, quiet=True):
        run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
