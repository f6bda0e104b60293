"""Where one worker thread's CPU goes per delivery: deliver_email under cProfile.

    python -m bench.deliver_profile [--deliveries 400] [--top 30] [--sort tottime]

Builds ``--deliveries`` due email deliveries in one bench tenant as bench/deliver.py does,
starts the same local SES endpoint (and the embedded PostgreSQL/Redis when DATABASE_URL or
REDIS_URL is unset), logs as a Dramatiq worker process does (INFO, one line per record
written out), then runs ``deliver_email`` in this thread, 20 deliveries per call as the
product enqueues them, under cProfile. Prints the CPU per delivery (process time, profiler
overhead included, and once more without the profiler on a fresh set) and the top
functions by thread CPU time (the whole profile is left in .tocsin/bench/deliver.prof).
Figures for finding the next cost to cut, not a timed test.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import logging
import os
import pstats
import secrets
import sys
import time
import uuid
from collections.abc import Sequence

import psycopg

from bench.deliver import (
    LOGS,
    Connection,
    Endpoint,
    accepted_count,
    build,
    delivery_ids,
    drop_bench_tenants,
    load,
    say,
)


def deliver_all(slug: str, ids: list[int], per_message: int) -> None:
    from actors.email import deliver_email

    for start in range(0, len(ids), per_message):
        deliver_email.fn(slug, *ids[start:start + per_message])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.deliver_profile",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--deliveries", type=int, default=400, help="deliveries per pass (400)")
    parser.add_argument("--top", type=int, default=30, help="functions to list (30)")
    parser.add_argument("--sort", default="tottime", help="pstats sort key (tottime)")
    args = parser.parse_args(argv)
    if args.deliveries < 1:
        parser.error("--deliveries must be at least 1")
    LOGS.mkdir(parents=True, exist_ok=True)
    from tocsin.shell.services import free_port

    endpoint = Endpoint(free_port())
    os.environ["SES_ENDPOINT_URL"] = endpoint.url
    stop_services = None
    try:
        if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
            from tocsin.shell.services import start_embedded

            services = start_embedded(LOGS, dict(os.environ))
            os.environ.update(services.env)
            stop_services = services.stop
        os.environ["DRAMATIQ_NAMESPACE"] = f"tocsin-bench-{uuid.uuid4().hex[:8]}"
        os.environ["SES_MAX_SEND_RATE"] = "1000000"
        os.environ.setdefault("SESSION_SECRET", secrets.token_urlsafe(48))
        from actors.email import EMAILS_PER_MESSAGE
        from db.platform.migrations import migrate_all
        from tocsin import boot
        from tocsin.core.settings import load_settings

        settings = boot.start(load_settings())
        boot.start_messaging(settings)
        migrate_all()
        # As Dramatiq's worker processes log: INFO, each record formatted and written out.
        sink = open(os.devnull, "w")  # noqa: SIM115  (closed below)
        handler = logging.StreamHandler(sink)
        handler.setFormatter(logging.Formatter(
            "[%(asctime)s] [PID %(process)d] [%(threadName)s] [%(name)s] [%(levelname)s] %(message)s"))
        logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
        conn = psycopg.connect(settings.database_url, autocommit=True)
        try:
            plain = timed_pass(conn, args.deliveries, EMAILS_PER_MESSAGE, None)
            # Thread CPU time, not wall time: waits on PostgreSQL and the endpoint cost no CPU.
            profile = cProfile.Profile(time.thread_time)
            profiled = timed_pass(conn, args.deliveries, EMAILS_PER_MESSAGE, profile)
            say(f"load average {load()}")
            say(f"CPU per delivery: {plain * 1000:.3f} ms without the profiler, "
                f"{profiled * 1000:.3f} ms under it ({args.deliveries} deliveries each)")
            profile.dump_stats(LOGS / "deliver.prof")  # for a closer look with pstats
            out = io.StringIO()
            stats = pstats.Stats(profile, stream=out)
            stats.sort_stats(args.sort).print_stats(args.top)
            stats.sort_stats("cumulative").print_stats(args.top)
            say(out.getvalue())
        finally:
            drop_bench_tenants(conn)
            conn.close()
            sink.close()
    finally:
        endpoint.stop()
        if stop_services is not None:
            stop_services()
    return 0


def timed_pass(conn: Connection, count: int, per_message: int,
               profile: cProfile.Profile | None) -> float:
    """Fresh deliveries, sent in this thread; the process CPU seconds per delivery."""
    drop_bench_tenants(conn)
    (tenant,) = build(conn, count, 1)
    ids = delivery_ids(conn, tenant)
    deliver_all(tenant.slug, ids[:per_message], per_message)  # connections, clients, caches warm
    rest = ids[per_message:]
    started = time.process_time()
    if profile is not None:
        profile.enable()
    deliver_all(tenant.slug, rest, per_message)
    if profile is not None:
        profile.disable()
    cpu = time.process_time() - started
    accepted, other = accepted_count(conn, [tenant])
    if accepted != count or other:
        raise SystemExit(f"{accepted} of {count} accepted, {other} settled otherwise")
    return cpu / len(rest)


if __name__ == "__main__":
    sys.exit(main())
