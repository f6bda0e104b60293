"""Licence-scan throughput: figures, not a timed test.

    python -m bench.scan [--clients 200000] [--tenants 100] [--naive-sample 2000]
                         [--as-of 2027-03-28T09:00:00Z] [--workers CPUS] [--seed 1] [--keep]

Builds ``--clients`` clients spread over ``--tenants`` bench tenants (slugs bench-0001...),
about a tenth of them with a milestone due (expiring within the next 30 days or just
expired), the rest expiring more than 120 days out. Then, in one run, it measures claims/s
(ledger rows written per second) for:

  (a) the project's scan, as production runs it: one ``scan_tenant`` message per tenant
      (the tick's fan-out) through Redis to a real Dramatiq worker with ``--workers``
      threads (default: one per CPU; ``--workers 1`` scans one tenant after another);
  (b) the naive design: for a sample of due (client, threshold) pairs computed in Python
      by ``domain.notices.licence``, one transaction per pair: SELECT the key, INSERT if absent;
  (c) the raw ceiling: one bare ``INSERT ... SELECT ... ON CONFLICT DO NOTHING`` of as many
      rows as (a) wrote, into an empty table identical to ``notification_ledger``;
  (d) a replay of (a) at the same instant, when everything is claimed already.

(in the order a, d, c, b, each after a CHECKPOINT) and prints each figure, the ratios a/c,
a/b and the replay speed-up, whether each goal is met, and a Markdown table the README can
quote.

DATABASE_URL / REDIS_URL name the services; when either is unset the embedded ones are
started under .tocsin/bench. The bench tenants are marked suspended (so a clock running on
the same database never scans them) and dropped at the end unless --keep; leftovers of an
earlier run are dropped before building.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
from psycopg import sql

from bench.services import bench_services
from domain.notices.licence import CADENCE, RULE, SUBJECT_KIND, Outcome, milestone_outcomes
from domain.people.identity import Plan, parse_instant, schema_for

Connection = psycopg.Connection[tuple[Any, ...]]

SLUG_PREFIX = "bench-"
SLUG_PATTERN = "^bench-[0-9]+$"  # only what this bench creates
SCHEMA_PATTERN = "^t_bench_[0-9]+$"
SCRATCH = "bench_scratch"  # the naive and raw-ceiling tables live here

DUE_FRACTION = 0.10  # share of clients with a milestone due at the scan's instant
DUE_DAYS = (-15, 30)  # expiry, in days from today (UTC), of the due clients: just expired..30 days
FAR_DAYS = (121, 730)  # expiry of the others: nothing is due (the earliest window opens at -90)
ENTERPRISE_SHARE = 0.3  # enterprise clients also get d90 and d60
TENANT_ZONES = ("Europe/London", "America/New_York", "Asia/Kolkata", "Australia/Sydney", "UTC")
# None: the tenant's default zone (most clients); the others span both sides of UTC.
CLIENT_ZONES: tuple[str | None, ...] = (
    None, None, None, None, None, "America/Los_Angeles", "Asia/Tokyo", "Pacific/Auckland",
    "Europe/Berlin",
)
# A milestone can be due only for clients expiring before the UTC date + this (a local date is
# at most a day ahead of UTC, and the earliest window opens 90 days before expiry).
HORIZON_DAYS = 1 - min(m.offset_days for m in CADENCE)

LEDGER_COLUMNS = (
    "rule", "subject_kind", "subject_id", "threshold", "due_on", "status", "status_reason",
    "local_date",
)
SUBJECT_STRIDE = 1_000_000_000  # subject ids of different tenants never meet in one table

GOAL_A_OVER_C = 0.5
GOAL_A_OVER_B = 50.0
GOAL_REPLAY_SPEEDUP = 3.0


def say(text: str = "") -> None:
    print(text, flush=True)


@dataclass(frozen=True)
class BenchTenant:
    number: int
    slug: str
    schema: str
    time_zone: str


@dataclass(frozen=True)
class Figure:
    label: str
    rows: int  # ledger rows written (claims)
    seconds: float

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class ScanTotals:
    expired: int
    closed: int
    claimed: int
    skipped: int

    @property
    def claims(self) -> int:
        return self.claimed + self.skipped


# -- services and connections ------------------------------------------------------------


def connect() -> Connection:
    from tocsin.core.settings import load_settings

    return psycopg.connect(load_settings().database_url, autocommit=True)


def try_checkpoint(conn: Connection) -> None:
    """Start each timed phase with no dirty buffers left over by the one before it."""
    # Not allowed for this role: the figures are just a little noisier.
    with contextlib.suppress(psycopg.Error):
        conn.execute("CHECKPOINT")


def machine_facts(conn: Connection, embedded: bool) -> list[tuple[str, str]]:
    def show(name: str) -> str:
        row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
        return "?" if row is None else str(row[0])

    return [
        ("cpus", str(os.cpu_count())),
        ("platform", platform.platform()),
        ("python", platform.python_version()),
        ("postgres", show("server_version")),
        ("postgres service", "embedded (pgserver)" if embedded else "external (DATABASE_URL)"),
        ("shared_buffers", show("shared_buffers")),
        ("synchronous_commit", show("synchronous_commit")),
        ("fsync", show("fsync")),
        ("autovacuum", show("autovacuum")),
    ]


# -- build -------------------------------------------------------------------------------


def drop_bench_objects(conn: Connection) -> int:
    """Drop every bench tenant (rows and schemas, orphans included) and the scratch schema.
    One transaction per tenant keeps the lock table small."""
    slugs = [
        str(r[0])
        for r in conn.execute(
            "SELECT slug FROM control.tenants WHERE slug ~ %s ORDER BY slug", [SLUG_PATTERN]
        ).fetchall()
    ]
    schemas = {schema_for(s) for s in slugs}
    schemas |= {
        str(r[0])
        for r in conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname ~ %s", [SCHEMA_PATTERN]
        ).fetchall()
    }
    for schema in sorted(schemas):
        with conn.transaction():
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
            conn.execute("DELETE FROM control.schema_migrations WHERE schema_name = %s", [schema])
            conn.execute(
                "DELETE FROM control.api_keys WHERE tenant_id IN "
                "(SELECT id FROM control.tenants WHERE schema_name = %s)",
                [schema],
            )
            conn.execute(
                "DELETE FROM control.tenants WHERE schema_name = %s AND slug ~ %s",
                [schema, SLUG_PATTERN],
            )
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCRATCH)))
    return len(schemas)


def client_rows(
    rng: random.Random, tenant_no: int, count: int, today: date
) -> list[tuple[str, str, date, str | None]]:
    rows = []
    for i in range(count):
        span = DUE_DAYS if rng.random() < DUE_FRACTION else FAR_DAYS
        expires = today + timedelta(days=rng.randint(*span))
        plan = Plan.ENTERPRISE if rng.random() < ENTERPRISE_SHARE else Plan.STANDARD
        zone = rng.choice(CLIENT_ZONES)
        rows.append((f"Client {tenant_no:04d}-{i + 1:06d}", plan.value, expires, zone))
    return rows


def build(
    conn: Connection, clients: int, tenants: int, today: date, seed: int
) -> list[BenchTenant]:
    from db.platform.tenancy import create_tenant

    width = max(4, len(str(tenants)))
    built: list[BenchTenant] = []
    loaded = 0
    started = time.perf_counter()
    base, extra = divmod(clients, tenants)
    for n in range(1, tenants + 1):
        slug = f"{SLUG_PREFIX}{n:0{width}d}"
        zone = TENANT_ZONES[(n - 1) % len(TENANT_ZONES)]
        tenant = create_tenant(slug, f"Bench tenant {n}", zone)
        conn.execute("UPDATE control.tenants SET status = 'suspended' WHERE id = %s", [tenant.id])
        schema = sql.Identifier(tenant.schema)
        size = base + (1 if n <= extra else 0)
        rows = client_rows(random.Random(seed * 100_003 + n), n, size, today)
        with conn.transaction(), conn.cursor() as cur:
            copy_sql = sql.SQL(
                "COPY {}.clients (name, plan, access_expires_on, time_zone) FROM STDIN"
            ).format(schema)
            with cur.copy(copy_sql) as copy:
                for row in rows:
                    copy.write_row(row)
            # What create_client records for every client, so the table has its real size.
            cur.execute(
                sql.SQL(
                    "INSERT INTO {0}.license_events (client_id, event, access_expires_on, actor) "
                    "SELECT id, 'created', access_expires_on, 'cli' FROM {0}.clients ORDER BY id"
                ).format(schema)
            )
        # A live database has statistics and a visibility map; give the bench tables both.
        for table in ("clients", "license_events", "notification_ledger"):
            conn.execute(sql.SQL("VACUUM ANALYZE {}.{}").format(schema, sql.Identifier(table)))
        built.append(BenchTenant(n, tenant.slug, tenant.schema, tenant.time_zone))
        loaded += len(rows)
        if n % max(1, tenants // 10) == 0 or n == tenants:
            say(f"  built {n}/{tenants} tenants, {loaded:,} clients "
                f"({time.perf_counter() - started:.1f}s)")
    return built


def due_pairs(
    conn: Connection, tenants: Sequence[BenchTenant], as_of: datetime
) -> list[tuple[Any, ...]]:
    """Every (client, threshold) row the cadence yields at as_of, computed in Python the
    way a naive scan would: select the clients that may be due, then ask domain/notices/licence.py."""
    horizon = as_of.astimezone(UTC).date() + timedelta(days=HORIZON_DAYS)
    zones: dict[str, ZoneInfo] = {}
    pairs: list[tuple[Any, ...]] = []
    for t in tenants:
        rows = conn.execute(
            sql.SQL(
                "SELECT id, plan, access_expires_on, time_zone FROM {}.clients "
                "WHERE status IN ('active', 'expired') AND access_expires_on <= %s ORDER BY id"
            ).format(sql.Identifier(t.schema)),
            [horizon],
        ).fetchall()
        for client_id, plan, expires, zone_name in rows:
            zone = zones.setdefault(zone_name or t.time_zone, ZoneInfo(zone_name or t.time_zone))
            today = as_of.astimezone(zone).date()
            for milestone, outcome in milestone_outcomes(expires, Plan(plan), today):
                skipped = outcome is Outcome.SKIPPED
                pairs.append((
                    RULE, SUBJECT_KIND, t.number * SUBJECT_STRIDE + client_id, milestone.threshold,
                    expires, "skipped" if skipped else "claimed",
                    "a later milestone's window had begun" if skipped else None, today,
                ))
    return pairs


def create_scratch(conn: Connection, template: BenchTenant) -> None:
    """Two empty tables identical to notification_ledger: LIKE ... INCLUDING ALL copies the
    columns, defaults, identity, checks and every index (the unique key included); the one
    foreign key is added by hand, since every insert into the real table pays its check."""
    like = sql.Identifier(template.schema, "notification_ledger")
    users = sql.Identifier(template.schema, "users")
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCRATCH)))
    for table in ("naive_ledger", "raw_ledger"):
        name = sql.Identifier(SCRATCH, table)
        conn.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(name, like))
        conn.execute(
            sql.SQL("ALTER TABLE {} ADD FOREIGN KEY (acknowledged_by) REFERENCES {} (id)").format(
                name, users
            )
        )


# -- the four measurements ---------------------------------------------------------------


def project_scan(
    conn: Connection, tenants: Sequence[BenchTenant], as_of: datetime, workers: int
) -> tuple[ScanTotals, float]:
    """The project's scan of all tenants as production runs it: one scan_tenant message per
    tenant (the tick's fan-out) through Redis to a real Dramatiq worker with ``workers``
    threads, timed from the first send until the worker has finished the last scan.
    What the scans did is read back from the tenants' tables afterwards (untimed)."""
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    from actors.scan import scan_tenant
    from tocsin.core import runtime
    from tocsin.messaging.broker import install_broker

    broker = install_broker(runtime.settings())

    before = scan_outcomes(conn, tenants)
    worker = dramatiq.Worker(broker, queues={"scan"}, worker_threads=workers, worker_timeout=20)
    worker.start()
    try:
        started = time.perf_counter()
        for t in tenants:
            scan_tenant.send(t.slug, as_of.isoformat())
        if isinstance(broker, RedisBroker):
            broker.join("scan", interval=5)  # milliseconds between two looks at the queue
        else:  # RabbitMQ (BROKER_URL): its own join
            broker.join("scan")
        worker.join()
        elapsed = time.perf_counter() - started
    finally:
        worker.stop()
    after = scan_outcomes(conn, tenants)
    return ScanTotals(*(a - b for a, b in zip(after, before, strict=True))), elapsed


def scan_outcomes(conn: Connection, tenants: Sequence[BenchTenant]) -> tuple[int, int, int, int]:
    """(expired, closed, claimed, skipped) so far, summed over the bench tenants."""
    totals = [0, 0, 0, 0]
    for t in tenants:
        row = conn.execute(sql.SQL(
            """
            SELECT (SELECT count(*) FROM {events} WHERE event = 'expired'),
                   (SELECT count(*) FROM {events} WHERE event = 'closed'),
                   count(*) FILTER (WHERE status = 'claimed'),
                   count(*) FILTER (WHERE status = 'skipped')
            FROM {ledger}
            """).format(events=sql.Identifier(t.schema, "license_events"),
                        ledger=sql.Identifier(t.schema, "notification_ledger"))).fetchone()
        assert row is not None
        totals = [total + int(v) for total, v in zip(totals, row, strict=True)]
    return totals[0], totals[1], totals[2], totals[3]


def ledger_rows(conn: Connection, tenants: Sequence[BenchTenant]) -> int:
    total = 0
    for t in tenants:
        table = sql.Identifier(t.schema, "notification_ledger")
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
        assert row is not None
        total += int(row[0])
    return total


def naive_claims(conn: Connection, sample: Sequence[tuple[Any, ...]]) -> tuple[int, float]:
    """One transaction per row over one connection: check, then insert if absent."""
    table = sql.Identifier(SCRATCH, "naive_ledger")
    check = sql.SQL(
        "SELECT 1 FROM {} WHERE rule = %s AND subject_kind = %s AND subject_id = %s "
        "AND threshold = %s AND due_on = %s"
    ).format(table)
    insert = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        table,
        sql.SQL(", ").join(map(sql.Identifier, LEDGER_COLUMNS)),
        sql.SQL(", ").join(sql.Placeholder() * len(LEDGER_COLUMNS)),
    )
    inserted = 0
    started = time.perf_counter()
    for row in sample:
        with conn.transaction():
            if conn.execute(check, row[:5]).fetchone() is None:
                conn.execute(insert, row)
                inserted += 1
    return inserted, time.perf_counter() - started


def raw_ceiling(conn: Connection, tenants: Sequence[BenchTenant]) -> tuple[int, int, float]:
    """Copy every ledger row (a) wrote into one source table (untimed), then time one bare
    INSERT ... SELECT ... ON CONFLICT DO NOTHING of them into an empty identical table."""
    columns = sql.SQL(", ").join(map(sql.Identifier, LEDGER_COLUMNS))
    source = sql.Identifier(SCRATCH, "raw_source")
    conn.execute(
        sql.SQL("CREATE UNLOGGED TABLE {} AS SELECT {} FROM {} WITH NO DATA").format(
            source, columns, sql.Identifier(tenants[0].schema, "notification_ledger")
        )
    )
    for t in tenants:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} SELECT rule, subject_kind, subject_id + %s::bigint, threshold, "
                "due_on, status, status_reason, local_date FROM {} ORDER BY id"
            ).format(source, sql.Identifier(t.schema, "notification_ledger")),
            [t.number * SUBJECT_STRIDE],
        )
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(source))
    row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(source)).fetchone()
    assert row is not None
    try_checkpoint(conn)
    started = time.perf_counter()
    cur = conn.execute(
        sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT DO NOTHING").format(
            sql.Identifier(SCRATCH, "raw_ledger"), columns, columns, source
        )
    )
    elapsed = time.perf_counter() - started
    return int(row[0]), cur.rowcount, elapsed


# -- report ------------------------------------------------------------------------------


def ratio(top: float, bottom: float) -> float:
    return top / bottom if bottom > 0 else float("inf")


def verdict(value: float, goal: float) -> str:
    return "met" if value >= goal else "MISSED"


def fmt_rate(rate: float) -> str:
    return f"{rate:,.0f}"


def report(
    facts: list[tuple[str, str]],
    args: argparse.Namespace,
    a: Figure,
    b: Figure,
    c: Figure,
    d: Figure,
    replay_checked: int,
) -> None:
    a_over_c = ratio(a.rate, c.rate)
    a_over_b = ratio(a.rate, b.rate)
    speedup = ratio(a.seconds, d.seconds)
    say()
    say("Figures (claims = ledger rows written; claims/s = claims / wall-clock seconds)")
    say(f"  {'measurement':<52} {'claims':>9} {'seconds':>9} {'claims/s':>11}")
    for fig in (a, b, c):
        say(f"  {fig.label:<52} {fig.rows:>9,} {fig.seconds:>9.3f} {fmt_rate(fig.rate):>11}")
    say(f"  {d.label:<52} {d.rows:>9,} {d.seconds:>9.3f} {'-':>11}")
    say(f"      replay re-checked {replay_checked:,} claimed keys "
        f"({fmt_rate(ratio(replay_checked, d.seconds))} keys/s)")
    say()
    say("Ratios")
    say(f"  a/c  project scan / raw ceiling             {a_over_c:8.2f}   "
        f"goal >= {GOAL_A_OVER_C:g}   {verdict(a_over_c, GOAL_A_OVER_C)}")
    say(f"  a/b  project scan / naive                   {a_over_b:8.1f}   "
        f"goal >= {GOAL_A_OVER_B:g}    {verdict(a_over_b, GOAL_A_OVER_B)}")
    say(f"  d/a  replay speed-up, time(a) / time(d)     {speedup:8.2f}x  "
        f"goal >= {GOAL_REPLAY_SPEEDUP:g}x    {verdict(speedup, GOAL_REPLAY_SPEEDUP)}")
    say()
    say("Markdown (for the README)")
    say()
    machine = dict(facts)
    say(f"{args.clients:,} clients in {args.tenants} tenants, {a.rows:,} claims; "
        f"{machine['cpus']} CPUs, PostgreSQL {machine['postgres'].split()[0]} "
        f"({'embedded' if machine['postgres service'].startswith('embedded') else 'system'}), "
        f"synchronous_commit={machine['synchronous_commit']}.")
    say()
    say("| measurement | claims | seconds | claims/s |")
    say("|---|---:|---:|---:|")
    for fig in (a, b, c):
        say(f"| {fig.label} | {fig.rows:,} | {fig.seconds:.3f} | {fmt_rate(fig.rate)} |")
    say(f"| {d.label} | {d.rows:,} | {d.seconds:.3f} | - |")
    say()
    say("| ratio | value | goal | |")
    say("|---|---:|---:|---|")
    say(f"| a/c (scan vs raw ceiling) | {a_over_c:.2f} | >= {GOAL_A_OVER_C:g} | "
        f"{verdict(a_over_c, GOAL_A_OVER_C)} |")
    say(f"| a/b (scan vs naive) | {a_over_b:.1f} | >= {GOAL_A_OVER_B:g} | "
        f"{verdict(a_over_b, GOAL_A_OVER_B)} |")
    say(f"| replay speed-up, time(a)/time(d) | {speedup:.2f}x | >= {GOAL_REPLAY_SPEEDUP:g}x | "
        f"{verdict(speedup, GOAL_REPLAY_SPEEDUP)} |")


# -- main --------------------------------------------------------------------------------


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scan", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--clients", type=positive, default=200_000,
                        help="clients in all (200000)")
    parser.add_argument("--tenants", type=positive, default=100,
                        help="tenants to spread them over (100)")
    parser.add_argument("--naive-sample", type=positive, default=2_000,
                        help="claims the naive design makes, one transaction each (2000)")
    parser.add_argument("--as-of", type=parse_instant, default=None,
                        help="the scan's instant, ISO-8601 with an offset (default: now)")
    parser.add_argument("--workers", type=positive, default=os.cpu_count() or 1,
                        help="threads of the Dramatiq worker running (a) and (d) "
                             "(default: one per CPU; 1: one tenant after another)")
    parser.add_argument("--seed", type=int, default=1, help="random seed for the data (1)")
    parser.add_argument("--keep", action="store_true", help="keep the bench tenants afterwards")
    args = parser.parse_args(argv)
    if args.tenants > args.clients:
        parser.error("--tenants must not exceed --clients")
    return args


def run(args: argparse.Namespace, embedded: bool) -> None:
    from db.platform.migrations import migrate_all
    from db.platform.pool import open_pool
    from tocsin.core.settings import load_settings

    as_of: datetime = args.as_of or datetime.now(UTC)
    # Open the pool now, with one connection per scanning thread, so that no timed phase
    # pays for opening connections.
    settings = load_settings()
    open_pool(
        settings.database_url,
        max_size=max(settings.db_pool_max, args.workers),
        min_size=args.workers,
    )
    migrate_all()
    conn = connect()
    try:
        facts = machine_facts(conn, embedded)
        say("Machine")
        for name, value in facts:
            say(f"  {name:<20} {value}")
        say(f"  {'dramatiq namespace':<20} {os.environ['DRAMATIQ_NAMESPACE']}")
        say(f"Scan instant (as_of): {as_of.isoformat()}")

        dropped = drop_bench_objects(conn)
        if dropped:
            say(f"Dropped {dropped} bench tenant schema(s) left by an earlier run")

        say(f"Building {args.clients:,} clients in {args.tenants} tenants "
            f"(~{DUE_FRACTION:.0%} due: expiry {DUE_DAYS[0]}..+{DUE_DAYS[1]} days; "
            f"the rest +{FAR_DAYS[0]}..+{FAR_DAYS[1]} days)")
        tenants = build(conn, args.clients, args.tenants, as_of.astimezone(UTC).date(), args.seed)
        pairs = due_pairs(conn, tenants, as_of)
        create_scratch(conn, tenants[0])
        say(f"  domain/notices/licence.py yields {len(pairs):,} (client, threshold) rows at as_of")

        say(f"(a) project scan: one scan_tenant message per tenant, through Redis, to a Dramatiq "
            f"worker with {args.workers} thread(s) ...")
        say("    (bench tenants have no users: claims write no inbox rows and enqueue no email)")
        try_checkpoint(conn)
        scan, a_seconds = project_scan(conn, tenants, as_of, args.workers)
        written = ledger_rows(conn, tenants)
        say(f"    {scan.claims:,} claims ({scan.claimed:,} claimed + {scan.skipped:,} skipped), "
            f"{scan.expired:,} clients expired, {scan.closed:,} closed; "
            f"ledger rows counted: {written:,} "
            f"({'matches' if written == scan.claims else 'DOES NOT MATCH'})")
        say("(d) replay of (a) at the same instant ...")
        try_checkpoint(conn)
        replay, d_seconds = project_scan(conn, tenants, as_of, args.workers)
        after = ledger_rows(conn, tenants)
        say(f"    {replay.claims:,} new claims, {replay.expired + replay.closed} transitions; "
            f"ledger rows now {after:,} ({'unchanged' if after == written else 'CHANGED'})")

        say("(c) raw ceiling: one INSERT ... SELECT ... ON CONFLICT DO NOTHING ...")
        source_rows, inserted, c_seconds = raw_ceiling(conn, tenants)
        say(f"    {inserted:,} of {source_rows:,} rows inserted")

        sample_size = min(args.naive_sample, len(pairs))
        say(f"(b) naive: {sample_size:,} sampled pairs, one BEGIN/SELECT/INSERT/COMMIT each "
            "(selecting the due clients is not timed) ...")
        sample = random.Random(args.seed).sample(pairs, sample_size)
        try_checkpoint(conn)
        naive_inserted, b_seconds = naive_claims(conn, sample)
        say(f"    {naive_inserted:,} rows inserted")

        threads = "" if args.workers == 1 else f", {args.workers} threads"
        report(
            facts, args,
            Figure(f"(a) project scan, {args.tenants} tenants{threads}", scan.claims, a_seconds),
            Figure("(b) naive, one transaction per claim (sample)", naive_inserted, b_seconds),
            Figure("(c) raw ceiling, one INSERT ... SELECT", inserted, c_seconds),
            Figure("(d) replay of (a), everything claimed", replay.claims, d_seconds),
            replay_checked=written,
        )
    finally:
        if not args.keep:
            say()
            say("Dropping the bench tenants (use --keep to keep them) ...")
            drop_bench_objects(conn)
        else:
            say()
            say(f"Kept the bench tenants ({SLUG_PREFIX}*) and schema {SCRATCH}.")
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with bench_services(say) as embedded:
        run(args, embedded)
    return 0


if __name__ == "__main__":
    sys.exit(main())
