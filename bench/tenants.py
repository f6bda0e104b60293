"""Many tenants: what schema-per-tenant costs when the same clients are spread thin.

    python -m bench.tenants [--clients 100000] [--few 100] [--many 2000]
                            [--workers CPUS] [--seed 1] [--keep]

The same ``--clients`` clients (the same rows, from bench/scan.py's generator) are laid
out twice: as ``--few`` tenants (100 x 1,000) and as ``--many`` tenants (2,000 x 50). It
prints:

  (1) `tocsin migrate` over the ``--many`` schemas, made empty in bulk (tenant rows and
      CREATE SCHEMA in one transaction): the real command, as a subprocess, with the
      same migrations every tenant gets; seconds per tenant;
  (2) the scan of each layout, as production runs it (one scan_tenant message per tenant
      through Redis to a real Dramatiq worker, bench/scan.py's project_scan): claims/s,
      and the many-tenant figure as a share of the few-tenant one (goal: at least 0.5);
  (3) the replay of the many-tenant scan (everything claimed): the fixed cost of one
      tenant's scan, in milliseconds per tenant;
  (3b) where that replay spends its time, part by part, one tenant after another in this
      process, and the claim statements' planning against execution (EXPLAIN ANALYZE);
  (3c) the floor under a tenant's first scan, measured before (2): the scan's own
      statements on one connection, tenants one after another, no message, no pool and
      no commit (each tenant's transaction rolled back), once with a fresh connection and
      once more with the same one (its catalog caches warm); and what it bounds the share
      to, were the rest free and the CPUs perfectly shared;
  (3d) what keeping the plans instead would cost: backend memory per tenant once the
      claim statements have run, unprepared and prepared;
  (4) a full tick over the ``--many`` tenants, end to end: the clock's `tick` message to a
      real worker, which fans out one scan per active tenant and runs them all; timed from
      the send until the scan queue is empty; then the same for the sweep.

Bench tenants are suspended except while (4) runs, so a clock on the same database never
scans them; they are dropped at the end unless --keep. DATABASE_URL / REDIS_URL name the
services; when unset, the embedded ones are started under .tocsin/bench.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from bench.idle_tenants import IDLE_PREFIX, measure_idle_tenants, prepare_idle_tenants, report_idle
from bench.scan import (
    TENANT_ZONES,
    BenchTenant,
    Connection,
    client_rows,
    connect,
    ledger_rows,
    machine_facts,
    positive,
    project_scan,
    say,
    try_checkpoint,
)
from bench.services import BENCH_HOME, bench_services
from domain.people.identity import parse_instant
from tests.support.many_tenants import add_unmigrated_tenants, remove_tenants_like

if TYPE_CHECKING:
    from dramatiq import Broker

FEW_PREFIX = "benchfew-"
MANY_PREFIX = "benchmany-"
GOAL_MANY_OVER_FEW = 0.5



def _join(broker: Broker, queue: str) -> None:
    """Wait until ``queue`` is empty: Redis looks every 5 ms; RabbitMQ has its own join."""
    from dramatiq.brokers.redis import RedisBroker

    if isinstance(broker, RedisBroker):
        broker.join(queue, interval=5)  # milliseconds between two looks at the queue
    else:
        broker.join(queue)

def drop_all(conn: Connection) -> int:
    return remove_tenants_like(conn, FEW_PREFIX) + remove_tenants_like(conn, MANY_PREFIX)


def make_tenants(conn: Connection, prefix: str, count: int) -> list[BenchTenant]:
    """Suspended tenants with empty schemas, their zones spread as bench/scan.py spreads
    them; `tocsin migrate` gives them their tables."""
    schemas = add_unmigrated_tenants(conn, prefix, count, status="suspended")
    width = max(4, len(str(count)))
    tenants = [BenchTenant(n, f"{prefix}{n:0{width}d}", schema,
                           TENANT_ZONES[(n - 1) % len(TENANT_ZONES)])
               for n, schema in enumerate(schemas, start=1)]
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany("UPDATE control.tenants SET time_zone = %s WHERE slug = %s",
                        [(t.time_zone, t.slug) for t in tenants])
    return tenants


def migrate(label: str) -> float:
    """The real `tocsin migrate`, timed from start to exit; its progress goes to our stderr."""
    tocsin = Path(sys.executable).parent / "tocsin"
    started = time.perf_counter()
    done = subprocess.run([str(tocsin), "migrate"], stdout=subprocess.PIPE, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"tocsin migrate failed ({label}): exit {done.returncode}")
    say(f"    {done.stdout.strip()}")
    return elapsed


def load_clients(conn: Connection, tenants: Sequence[BenchTenant], clients: int, today: date,
                 seed: int) -> None:
    """The same ``clients`` rows whatever the layout: one generator, cut into tenants."""
    rng = random.Random(seed)
    rows = client_rows(rng, 0, clients, today)
    base, extra = divmod(clients, len(tenants))
    start = 0
    started = time.perf_counter()
    for t in tenants:
        size = base + (1 if t.number <= extra else 0)
        part, start = rows[start:start + size], start + size
        schema = sql.Identifier(t.schema)
        with conn.transaction(), conn.cursor() as cur:
            copy_sql = sql.SQL(
                "COPY {}.clients (name, plan, access_expires_on, time_zone) FROM STDIN"
            ).format(schema)
            with cur.copy(copy_sql) as copy:
                for row in part:
                    copy.write_row(row)
            cur.execute(sql.SQL(
                "INSERT INTO {0}.license_events (client_id, event, access_expires_on, actor) "
                "SELECT id, 'created', access_expires_on, 'cli' FROM {0}.clients ORDER BY id"
            ).format(schema))
        conn.execute(sql.SQL("VACUUM ANALYZE {}.clients").format(schema))
        if t.number % max(1, len(tenants) // 5) == 0:
            say(f"    loaded {t.number:,}/{len(tenants):,} tenants "
                f"({time.perf_counter() - started:.0f}s)")


class _Rollback(Exception):
    """Ends an EXPLAIN ANALYZE transaction without committing what it ran."""


def fixed_costs(tenants: Sequence[BenchTenant], as_of: datetime) -> dict[str, float]:
    """Where a tenant's replay scan spends its time: one pass over ``tenants``, one after
    another in this process, each part timed (milliseconds per tenant); then the claim
    statements' planning and execution as PostgreSQL reports them (EXPLAIN ANALYZE, rolled
    back). The statements are db/notices/licence_scan.py's own, read from the module."""
    from db.delivery.deliveries import schedule_due_deliveries
    from db.notices import licence_scan as licences
    from db.notices.fanout import prepare_claims
    from db.platform.runs import record_completed
    from db.platform.tenancy import tenant_tx
    from domain.liveness import RunKind

    parts = dict.fromkeys(("open the tenant transaction", "claim (3 statements)",
                           "prepare", "schedule deliveries", "completion record", "commit",
                           "whole scan"), 0.0)

    def add(name: str, since: float) -> float:
        now = time.perf_counter()
        parts[name] += now - since
        return now

    for t in tenants:
        start = time.perf_counter()
        with tenant_tx(t.slug) as tx:
            mark = add("open the tenant transaction", start)
            licences.claim_due_milestones(tx, as_of)
            mark = add("claim (3 statements)", mark)
            prepare_claims(tx, as_of)
            mark = add("prepare", mark)
            schedule_due_deliveries(tx)
            mark = add("schedule deliveries", mark)
            record_completed(tx, RunKind.SCAN)
            mark = add("completion record", mark)
        add("commit", mark)
        add("whole scan", start)
    costs = {name: 1000 * seconds / len(tenants) for name, seconds in parts.items()}
    planning = execution = 0.0
    sample = tenants[:: max(1, len(tenants) // 50)]
    for t in sample:
        try:
            with tenant_tx(t.slug) as tx:
                params = licences._parameters(as_of, tx.tenant.time_zone)
                for statement in (licences._EXPIRE, licences._CLAIM, licences._CLOSE):
                    for (line,) in tx.conn.execute(
                            "EXPLAIN (ANALYZE, SUMMARY) " + statement, params).fetchall():
                        text = str(line)
                        if text.startswith("Planning Time:"):
                            planning += float(text.split()[2])
                        elif text.startswith("Execution Time:"):
                            execution += float(text.split()[2])
                raise _Rollback
        except _Rollback:
            pass
    costs["claim statements: planning"] = planning / len(sample)
    costs["claim statements: execution"] = execution / len(sample)
    return costs


def postgres_floor(tenants: Sequence[BenchTenant], as_of: datetime) -> tuple[float, float]:
    """(3c) ms per tenant of the scan's statements alone (db/notices/licence_scan.py's claims, the
    time rules' (one read when the tenant has none), the notices of what they claimed, the
    repair pass, the deliveries' scheduling, the completion record and the next-work instant,
    as db/notices/scan.py runs them), each tenant's transaction rolled back so every pass does
    the first scan's work: (fresh connection, same connection again)."""
    from db.delivery.deliveries import schedule_due_deliveries
    from db.notices.fanout import prepare_claims
    from db.notices.licence_scan import claim_due_milestones
    from db.notices.scan_horizon import next_scan_instant
    from db.platform.runs import record_completed
    from db.platform.tenancy import TenantTx, get_tenant
    from db.rules.time_rules import claim_time_rules
    from domain.liveness import RunKind
    from tocsin.core.settings import load_settings

    known = [get_tenant(t.slug) for t in tenants]
    passes: list[float] = []
    with psycopg.connect(load_settings().database_url) as conn:
        for _ in range(2):
            started = time.perf_counter()
            for tenant in known:
                conn.execute("SELECT set_config('search_path', %s, true)", [f"{tenant.schema}, public"])
                tx = TenantTx(conn, tenant)
                claim_due_milestones(tx, as_of)
                claim_time_rules(tx, as_of)
                prepare_claims(tx, as_of)
                schedule_due_deliveries(tx)
                record_completed(tx, RunKind.SCAN)
                next_scan_instant(tx, as_of)
                conn.rollback()
            passes.append(1000 * (time.perf_counter() - started) / len(known))
    return passes[0], passes[1]


def plan_memory(tenants: Sequence[BenchTenant], as_of: datetime) -> tuple[float, float]:
    """(3d) kB of backend memory per tenant after db/notices/licence_scan.py's three claim statements
    ran for it (a replay: nothing to claim), on a connection that does not keep them
    prepared (the catalog caches alone) and on one that does (plus a plan per schema)."""
    from db.notices import licence_scan as licences
    from tocsin.core.settings import load_settings

    def measured(prepared: bool) -> float:
        with psycopg.connect(load_settings().database_url, autocommit=True) as conn:
            conn.prepared_max = 100 * len(tenants)

            def used() -> int:
                row = conn.execute("SELECT sum(total_bytes) FROM pg_backend_memory_contexts").fetchone()
                return int(str(row[0])) if row else 0

            before = used()
            for t in tenants:
                conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(t.schema)))
                params = licences._parameters(as_of, t.time_zone)
                for statement in (licences._EXPIRE, licences._CLAIM, licences._CLOSE):
                    # the schema's own statement, as db/platform/pool.py names it
                    text = f"{statement} -- {t.schema}"
                    for _ in range(2):
                        conn.execute(text, params, prepare=prepared).fetchall()
            return (used() - before) / 1024 / len(tenants)

    return measured(False), measured(True)


def set_status(conn: Connection, prefix: str, status: str) -> None:
    conn.execute("UPDATE control.tenants SET status = %s WHERE starts_with(slug, %s)",
                 [status, prefix])


def run_on_worker(queue: str, send: Callable[[], object], workers: int) -> float:
    """The clock's message for ``queue``, sent by ``send``, run by a real Dramatiq worker of
    ``workers`` threads: seconds until the queue is empty and the worker idle."""
    import dramatiq

    from tocsin.messaging.broker import current_broker

    broker = current_broker()
    worker = dramatiq.Worker(broker, queues={queue}, worker_threads=workers, worker_timeout=20)
    worker.start()
    try:
        started = time.perf_counter()
        send()
        _join(broker, queue)
        worker.join()
        return time.perf_counter() - started
    finally:
        worker.stop()


def full_tick(conn: Connection, prefix: str, as_of: datetime, workers: int) -> tuple[int, float]:
    """`tick` through Redis to a real worker: it fans out a scan per active tenant and the
    worker runs them. Timed until the scan queue is empty and the worker idle."""
    from actors.scan import tick

    active = conn.execute("SELECT count(*) FROM control.tenants WHERE status = 'active'").fetchone()
    set_status(conn, prefix, "active")
    try:
        elapsed = run_on_worker("scan", lambda: tick.send(as_of.isoformat()), workers)
    finally:
        set_status(conn, prefix, "suspended")
    assert active is not None
    return int(str(active[0])), elapsed


def full_sweep(conn: Connection, prefix: str, workers: int) -> float:
    from actors.sweep import sweep

    set_status(conn, prefix, "active")
    try:
        return run_on_worker("sweep", sweep.send, workers)
    finally:
        set_status(conn, prefix, "suspended")


def server_log(embedded: bool) -> Path | None:
    """The embedded PostgreSQL's log, where pg_log_backend_memory_contexts writes."""
    log = BENCH_HOME.resolve() / "pg" / "log"
    return log if embedded and log.exists() else None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.tenants",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--clients", type=positive, default=100_000, help="clients (100000)")
    parser.add_argument("--few", type=positive, default=100, help="tenants, first layout (100)")
    parser.add_argument("--many", type=positive, default=2_000,
                        help="tenants, second layout (2000)")
    parser.add_argument("--as-of", type=parse_instant, default=None,
                        help="the scan's instant, ISO-8601 with an offset (default: now)")
    parser.add_argument("--workers", type=positive, default=os.cpu_count() or 1,
                        help="worker threads (default: one per CPU)")
    parser.add_argument("--seed", type=int, default=1, help="random seed for the data (1)")
    parser.add_argument("--keep", action="store_true", help="keep the bench tenants afterwards")
    parser.add_argument("--idle", type=int, default=10_000,
                        help="tenants of part (5), most of them idle at a tick (10000; 0: skip it)")
    parser.add_argument("--idle-clients", type=positive, default=10, help="clients each, part (5) (10)")
    parser.add_argument("--idle-due-every", type=positive, default=100,
                        help="one tenant in this many has something due at (5b)'s tick (100)")
    parser.add_argument("--jobs", type=positive, default=os.cpu_count() or 1,
                        help="`tocsin migrate --jobs` when making part (5)'s tenants (one per CPU)")
    parser.add_argument("--clone", choices=("yes", "no"), default="yes",
                        help="make part (5)'s schemas by cloning one migrated schema (yes, the "
                             "default) or with `tocsin migrate --jobs` (no)")
    parser.add_argument("--prepare-idle", action="store_true",
                        help="only make and load part (5)'s tenants, kept for later runs")
    parser.add_argument("--only-idle", action="store_true",
                        help="run part (5) alone, without the 100 x 1,000 / 2,000 x 50 layouts")
    args = parser.parse_args(argv)
    if not args.few < args.many <= args.clients:
        parser.error("need --few < --many <= --clients")
    return args


def run(args: argparse.Namespace, embedded: bool) -> None:
    from db.platform.migrations import migrate_all
    from db.platform.pool import open_pool
    from tocsin.core.settings import load_settings

    as_of: datetime = args.as_of or datetime.now(UTC)
    today = as_of.astimezone(UTC).date()
    settings = load_settings()
    from tocsin import boot
    from tocsin.messaging.broker import install_broker

    install_broker(boot.start(settings))
    open_pool(settings.database_url, max_size=max(settings.db_pool_max, args.workers),
              min_size=args.workers)
    migrate_all()
    conn = connect()
    try:
        facts = machine_facts(conn, embedded)
        say("Machine")
        for name, value in facts:
            say(f"  {name:<20} {value}")
        dropped = drop_all(conn)
        if dropped:
            say(f"Dropped {dropped} bench tenant(s) left by an earlier run")
        if args.prepare_idle:
            prepare_idle_tenants(conn, args.idle, args.idle_clients, args.idle_due_every,
                                 args.jobs, embedded, args.clone == "yes")
            args.keep = True
            return
        if args.idle:
            idle = measure_idle_tenants(conn, args.idle, args.idle_clients, args.idle_due_every,
                                        args.workers, args.jobs, server_log(embedded),
                                        args.clone == "yes")
            if args.only_idle:
                say()
                say("Markdown (for the docs)")
                report_idle(idle)
                return

        say(f"(1) {args.many:,} empty tenant schemas, then `tocsin migrate` over them ...")
        many = make_tenants(conn, MANY_PREFIX, args.many)
        migrate_seconds = migrate("many")
        say(f"    {migrate_seconds:.1f}s, {1000 * migrate_seconds / args.many:.1f} ms per tenant")
        few = make_tenants(conn, FEW_PREFIX, args.few)
        migrate("few")

        for label, tenants in (("few", few), ("many", many)):
            say(f"Loading {args.clients:,} clients into {len(tenants):,} tenants ({label}) ...")
            load_clients(conn, tenants, args.clients, today, args.seed)

        say(f"(3c) the floor: the scan's statements alone, {args.many:,} tenants one after another, "
            "rolled back ...")
        floor = postgres_floor(many, as_of)
        say(f"    {floor[0]:.2f} ms per tenant with a fresh connection, {floor[1]:.2f} ms with it warm")

        figures: dict[str, tuple[int, float]] = {}
        for label, tenants in (("few", few), ("many", many)):
            say(f"(2) scan of {len(tenants):,} tenants ({label}), {args.workers} worker thread(s) ...")
            try_checkpoint(conn)
            totals, seconds = project_scan(conn, tenants, as_of, args.workers)
            written = ledger_rows(conn, tenants)
            figures[label] = (totals.claims, seconds)
            say(f"    {totals.claims:,} claims in {seconds:.2f}s "
                f"({totals.claims / seconds:,.0f} claims/s); ledger rows {written:,}")
        say(f"(3) replay of the {args.many:,}-tenant scan (everything claimed) ...")
        try_checkpoint(conn)
        _, replay_seconds = project_scan(conn, many, as_of, args.workers)
        say(f"    {replay_seconds:.2f}s, {1000 * replay_seconds / args.many:.2f} ms per tenant")

        say(f"(3b) where a replay scan spends its time: {args.many:,} tenants, one after another ...")
        costs = fixed_costs(many, as_of)
        for name, ms in costs.items():
            say(f"    {name:<36} {ms:6.2f} ms per tenant")

        say("(3d) keeping the plans instead: backend memory per tenant ...")
        memory = plan_memory(many[:100], as_of)
        say(f"    {memory[0]:.0f} kB per tenant with the claim statements unprepared, "
            f"{memory[1]:.0f} kB kept prepared")

        next_day = as_of + timedelta(days=1)
        say(f"(4) full tick over every active tenant ({args.many:,} bench tenants), "
            f"as of {next_day.isoformat()} ...")
        try_checkpoint(conn)
        active, tick_seconds = full_tick(conn, MANY_PREFIX, next_day, args.workers)
        say(f"    {active + args.many:,} tenants scanned in {tick_seconds:.2f}s")
        sweep_seconds = full_sweep(conn, MANY_PREFIX, args.workers)
        say(f"    full sweep of {active + args.many:,} tenants in {sweep_seconds:.2f}s")

        report(facts, args, figures, migrate_seconds, replay_seconds, tick_seconds,
               sweep_seconds, costs, floor, memory)
        if args.idle:
            report_idle(idle)
    finally:
        if not args.keep:
            say()
            say("Dropping the bench tenants (use --keep to keep them) ...")
            drop_all(conn)
            remove_tenants_like(conn, IDLE_PREFIX)
        conn.close()


def report(facts: list[tuple[str, str]], args: argparse.Namespace,
           figures: dict[str, tuple[int, float]], migrate_seconds: float,
           replay_seconds: float, tick_seconds: float, sweep_seconds: float,
           costs: dict[str, float], floor: tuple[float, float], memory: tuple[float, float]) -> None:
    few_claims, few_seconds = figures["few"]
    many_claims, many_seconds = figures["many"]
    few_rate, many_rate = few_claims / few_seconds, many_claims / many_seconds
    share = many_rate / few_rate
    machine = dict(facts)
    say()
    say("Markdown (for the README)")
    say()
    say(f"{args.clients:,} clients; {machine['cpus']} CPUs, PostgreSQL "
        f"{machine['postgres'].split()[0]}, {args.workers} worker thread(s), "
        f"synchronous_commit={machine['synchronous_commit']}; load average at the end "
        f"{os.getloadavg()[0]:.1f} (other work on the machine makes every figure slower).")
    say()
    say("| measurement | value |")
    say("|---|---:|")
    say(f"| scan, {args.few:,} tenants x {args.clients // args.few:,} clients | "
        f"{few_rate:,.0f} claims/s ({few_claims:,} in {few_seconds:.2f}s) |")
    say(f"| scan, {args.many:,} tenants x {args.clients // args.many:,} clients | "
        f"{many_rate:,.0f} claims/s ({many_claims:,} in {many_seconds:.2f}s) |")
    say(f"| share, many / few (goal >= {GOAL_MANY_OVER_FEW:g}) | {share:.2f} "
        f"({'met' if share >= GOAL_MANY_OVER_FEW else 'MISSED'}) |")
    say(f"| `tocsin migrate`, {args.many:,} empty schemas | {migrate_seconds:.1f}s, "
        f"{1000 * migrate_seconds / args.many:.1f} ms per tenant |")
    say(f"| replay scan (nothing to claim) | {1000 * replay_seconds / args.many:.2f} ms per tenant |")
    say(f"| full tick, {args.many:,} tenants, end to end | {tick_seconds:.2f}s |")
    say(f"| full sweep, {args.many:,} tenants, end to end | {sweep_seconds:.2f}s |")
    cpus = int(machine["cpus"]) if machine["cpus"].isdigit() else 1
    # Were the many-tenant scan nothing but the warm floor per tenant, spread perfectly over
    # every CPU, with no message, commit or Python: the best share it could show.
    best_many = many_claims / (args.many * floor[1] / 1000 / cpus)
    say(f"| the floor of a first scan: its statements alone, rolled back | "
        f"{floor[0]:.2f} ms per tenant (fresh connection), {floor[1]:.2f} ms (warm) |")
    say(f"| share bound by the warm floor on {cpus} CPUs | {best_many / few_rate:.2f} |")
    say(f"| backend memory per tenant, claim statements unprepared / kept prepared | "
        f"{memory[0]:.0f} kB / {memory[1]:.0f} kB |")
    say()
    say("| a replay scan, one tenant after another | ms per tenant |")
    say("|---|---:|")
    for name, ms in costs.items():
        say(f"| {name} | {ms:.2f} |")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with bench_services(say) as embedded:
        run(args, embedded)
    return 0


if __name__ == "__main__":
    sys.exit(main())
