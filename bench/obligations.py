"""Obligations: the clock's set-based claim of time-trigger rules, against the raw ceiling.

    python -m bench.obligations [--tenants 100] [--subjects 10000] [--spread 60]
                                [--as-of 2027-03-28T09:00:00Z] [--workers CPUS] [--seed 1]
                                [--prefix oblbench] [--keep]

Builds ``--tenants`` tenants (made and migrated by db/platform/tenancy.py create_tenant, as the
product makes them; slugs ``<prefix>-0001``...), each with a legal-metrology product, the
three time rules below saved through db/rules/definitions.py (real, versioned rules), a working
calendar with two holidays, and ``--subjects`` subjects: certificates, permits and
inspections in equal shares, each with one ISO date fact (its due date, uniformly within
``--spread`` days either side of the scan's date), a site zone (half of them the tenant's,
the rest spread from UTC-11 to UTC+14) and a status (15% closed). Rows go in by COPY, then
VACUUM ANALYZE, so the tables have their real size, statistics and visibility map.
1,000,000 obligations by default (100 x 10,000: one due date watched by one rule each).

  certificate  field.calibration_due   offsets -30/-7/-1/0 days
  permit       field.permit_expires    offsets -10/-5/-1/0 working days (business_days)
  inspection   field.inspection_due    offsets -14/-3/0/+7 days, while subject.status
                                       is not "closed" (a condition)

Then, in one run (each timed phase after a CHECKPOINT):

  (a) the project's scan of every tenant, as production runs it: one ``scan_tenant``
      message per tenant (the tick's fan-out) through Redis to a real Dramatiq worker with
      ``--workers`` threads; each message runs actors/scan.py run_scan, whose transaction
      claims the licence milestones (none here) and the time rules (db/rules/time_rules.py),
      and whose commit enqueues the rule claims' preparation on the product's queue (not
      consumed here: preparation is another queue's work and is not in this figure). The
      first scan over fresh data: every window that has begun is written, the current
      one 'claimed', the earlier ones 'skipped';
  (d) the replay: the same scan again at the same instant, when nothing is new;
  (c) the raw ceiling: per tenant, one bare ``INSERT ... SELECT ... ON CONFLICT DO
      NOTHING`` into an empty copy of that tenant's notification_ledger (same columns,
      defaults, checks, indexes and foreign keys) of every (subject, rule, offset) whose
      date due + offset (calendar days) is on or before the scan's UTC date: no zones, no
      working days, no conditions, no subject kinds (each rule's fact name is its kind's
      here), no skip/claim distinction, no cancellation of moved dates, no preparation.
      Run with the same ``--workers`` threads, each tenant's statement in its own
      transaction (a commit per tenant, as the scan pays).

It prints claims/s of (a) and (c) (claims = ledger rows written), the ratio a/c (goal:
at least 0.5), the replay speed-up time(a)/time(d) (goal: at least 3x), whether each goal
is met, and checks the scan's ledger against domain/rules/obligation_dates.py (the same cadence
computed in Python, subject by subject): the bench fails if they differ or if the replay
writes anything.

DATABASE_URL / REDIS_URL name the services; when either is unset the embedded ones are
started under .tocsin/bench. The bench tenants are suspended (a clock running on the same
database never scans them) and dropped at the end unless --keep; leftovers of an earlier
run with the same prefix are dropped before building.
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from psycopg import sql

from bench.scan import (
    TENANT_ZONES,
    BenchTenant,
    Connection,
    connect,
    machine_facts,
    positive,
    project_scan,
    say,
    try_checkpoint,
)
from bench.services import bench_services
from domain.people.identity import parse_instant
from tests.support.many_tenants import remove_tenants_like

PRODUCT = "metrology"
GOAL_A_OVER_C = 0.5
GOAL_REPLAY_SPEEDUP = 3.0
CLOSED_SHARE = 0.15
STATUSES = (("open", 0.60), ("in_progress", 0.25), ("closed", CLOSED_SHARE))
# None: the tenant's zone. The others run from UTC-11 to UTC+14.
SUBJECT_ZONES: tuple[str | None, ...] = (
    None, None, None, None, None, None, "Europe/London", "Asia/Kolkata", "Pacific/Auckland",
    "America/Los_Angeles", "Pacific/Pago_Pago", "Pacific/Kiritimati",
)
CEILING_TABLE = "bench_ceiling_ledger"


def _rule(name: str, kind: str, fact: str, offsets: list[int], *, business_days: bool = False,
          conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    due: dict[str, Any] = {"fact": f"field.{fact}", "offsets": offsets}
    if business_days:
        due["business_days"] = True
    return {
        "name": name, "product": PRODUCT, "kind": "time",
        "trigger": {"subject_kind": kind, "due": due},
        "conditions": {"all": conditions or []}, "filters": {"all": []},
        "actions": {"channels": ["email", "in_app"], "category": "obligation_due", "critical": False,
                    "recipients": [{"type": "assignees"}],
                    "template": {"title": "{{ subject.title }} due {{ due.date }}",
                                 "body": "Offset {{ due.offset_days }}: {{ due.milestone_date }}."}},
    }


@dataclass(frozen=True)
class Watch:
    """What one of the bench's rules watches: its subjects' kind, the date fact, the offsets."""

    kind: str
    fact: str
    offsets: tuple[int, ...]
    business_days: bool
    unless_closed: bool


WATCHES = (
    Watch("certificate", "calibration_due", (-30, -7, -1, 0), False, False),
    Watch("permit", "permit_expires", (-10, -5, -1, 0), True, False),
    Watch("inspection", "inspection_due", (-14, -3, 0, 7), False, True),
)
RULES = (
    _rule("Calibration certificate due", "certificate", "calibration_due", [-30, -7, -1, 0]),
    _rule("Permit renewal (working days)", "permit", "permit_expires", [-10, -5, -1, 0],
          business_days=True),
    _rule("Inspection due while open", "inspection", "inspection_due", [-14, -3, 0, 7],
          conditions=[{"fact": "subject.status", "op": "not_equals", "value": "closed"}]),
)


@dataclass(frozen=True)
class Obligations:
    """A bench tenant and its three rules: (rule id, version) in WATCHES' order."""

    tenant: BenchTenant
    rules: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Figure:
    label: str
    rows: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


# -- build -------------------------------------------------------------------------------


def holidays_near(today: date) -> frozenset[date]:
    """Two holidays inside the spread, so working-day offsets meet them."""
    return frozenset({today + timedelta(days=2), today - timedelta(days=6)})


def subject_rows(rng: random.Random, count: int, today: date,
                 spread: int) -> list[tuple[str, str, str, str | None, str, date]]:
    """(kind, external id, title, zone, status, due) for ``count`` subjects."""
    statuses = [s for s, _ in STATUSES]
    weights = [w for _, w in STATUSES]
    rows = []
    for i in range(count):
        watch = WATCHES[i % len(WATCHES)]
        due = today + timedelta(days=rng.randint(-spread, spread))
        status = rng.choices(statuses, weights)[0]
        rows.append((watch.kind, f"{watch.kind[:4].upper()}-{i + 1:07d}",
                     f"{watch.kind.title()} {i + 1}", rng.choice(SUBJECT_ZONES), status, due))
    return rows


def build_tenant(conn: Connection, prefix: str, n: int, subjects: int, today: date, spread: int,
                 seed: int) -> Obligations:
    from db.events.products import create_product
    from db.platform.tenancy import create_tenant, tenant_tx
    from db.rules.calendar import save_calendar
    from db.rules.definitions import create_rule
    from domain.rules.obligation_dates import Calendar

    zone = TENANT_ZONES[(n - 1) % len(TENANT_ZONES)]
    tenant = create_tenant(f"{prefix}-{n:04d}", f"Obligations bench {n}", zone)
    conn.execute("UPDATE control.tenants SET status = 'suspended' WHERE id = %s", [tenant.id])
    with tenant_tx(tenant.slug) as tx:
        create_product(tx, PRODUCT, "Legal metrology", tuple(w.kind for w in WATCHES))
        rules = tuple((r.id, r.version) for r in (create_rule(tx, d, by="bench") for d in RULES))
        save_calendar(tx, Calendar(frozenset({1, 2, 3, 4, 5}), holidays_near(today)))
    rows = subject_rows(random.Random(seed * 100_003 + n), subjects, today, spread)
    schema = sql.Identifier(tenant.schema)
    fact_of = sql.SQL("CASE b.kind {} END").format(sql.SQL(" ").join(
        sql.SQL("WHEN {} THEN {}").format(sql.Literal(w.kind), sql.Literal(w.fact)) for w in WATCHES))
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("CREATE TEMP TABLE bench_subjects (n serial, kind text, external_id text, "
                    "title text, time_zone text, status text, due date) ON COMMIT DROP")
        with cur.copy("COPY bench_subjects (kind, external_id, title, time_zone, status, due) "
                      "FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cur.execute(sql.SQL(
            "INSERT INTO {}.subjects (product, kind, external_id, title, time_zone, status) "
            "SELECT %s, kind, external_id, title, time_zone, status FROM bench_subjects ORDER BY n"
        ).format(schema), [PRODUCT])
        cur.execute(sql.SQL(
            "INSERT INTO {0}.subject_fields (subject_id, name, value) "
            "SELECT s.id, {1}, to_jsonb(b.due::text) FROM bench_subjects b "
            "JOIN {0}.subjects s ON s.product = %s AND s.kind = b.kind "
            "AND s.external_id = b.external_id ORDER BY s.id"
        ).format(schema, fact_of), [PRODUCT])
    # A live database has statistics and a visibility map; give the bench tables both.
    for table in ("subjects", "subject_fields", "notification_ledger", "rules"):
        conn.execute(sql.SQL("VACUUM ANALYZE {}.{}").format(schema, sql.Identifier(table)))
    return Obligations(BenchTenant(n, tenant.slug, tenant.schema, tenant.time_zone), rules)


def build(conn: Connection, args: argparse.Namespace, today: date) -> list[Obligations]:
    built = []
    started = time.perf_counter()
    for n in range(1, args.tenants + 1):
        built.append(build_tenant(conn, args.prefix, n, args.subjects, today, args.spread, args.seed))
        if n % max(1, args.tenants // 10) == 0 or n == args.tenants:
            say(f"  built {n}/{args.tenants} tenants, {n * args.subjects:,} subjects "
                f"({time.perf_counter() - started:.1f}s)")
    return built


def drop_bench_tenants(conn: Connection, prefix: str) -> int:
    return remove_tenants_like(conn, f"{prefix}-")


# -- what the cadence says, subject by subject (the check) -------------------------------


def expected_rows(conn: Connection, built: Sequence[Obligations],
                  as_of: datetime) -> Counter[str]:
    """The ledger rows domain/rules/obligation_dates.py yields at ``as_of`` for every bench subject,
    by status ('claimed' for the current window, 'skipped' for those that had passed)."""
    from db.platform.tenancy import tenant_tx
    from db.rules.calendar import load_calendar
    from domain.rules.obligation_dates import outcomes_on

    by_kind = {w.kind: w for w in WATCHES}
    zones: dict[str, ZoneInfo] = {}
    counts: Counter[str] = Counter()
    for ob in built:
        with tenant_tx(ob.tenant.slug) as tx:
            calendar = load_calendar(tx)
        rows = conn.execute(sql.SQL(
            "SELECT s.kind, s.time_zone, s.status, f.value #>> '{{}}' FROM {}.subjects s "
            "JOIN {}.subject_fields f ON f.subject_id = s.id"
        ).format(sql.Identifier(ob.tenant.schema), sql.Identifier(ob.tenant.schema))).fetchall()
        for kind, zone_name, status, due_text in rows:
            watch = by_kind[kind]
            if watch.unless_closed and status == "closed":
                continue
            name = zone_name or ob.tenant.time_zone
            zone = zones.setdefault(name, ZoneInfo(name))
            today = as_of.astimezone(zone).date()
            for _, outcome in outcomes_on(date.fromisoformat(due_text), list(watch.offsets),
                                          watch.business_days, calendar, today):
                counts["claimed" if outcome == "due" else "skipped"] += 1
    return counts


def ledger_counts(conn: Connection, tenants: Sequence[BenchTenant]) -> Counter[str]:
    """Rule rows of the bench tenants' ledgers, by status."""
    counts: Counter[str] = Counter()
    for t in tenants:
        for status, n in conn.execute(sql.SQL(
                "SELECT status, count(*) FROM {} WHERE rule_id IS NOT NULL GROUP BY status"
        ).format(sql.Identifier(t.schema, "notification_ledger"))).fetchall():
            counts[str(status)] += int(n)
    return counts


# -- the raw ceiling ---------------------------------------------------------------------


def create_ceiling_tables(conn: Connection, built: Sequence[Obligations]) -> None:
    """In each bench schema, an empty table identical to notification_ledger: LIKE ...
    INCLUDING ALL copies columns, defaults, identity, checks and every index (the unique key
    included); the foreign keys are added by hand, since every insert into the real table
    pays their checks (rule_id's here)."""
    for ob in built:
        schema = ob.tenant.schema
        name, like = sql.Identifier(schema, CEILING_TABLE), sql.Identifier(schema, "notification_ledger")
        with conn.transaction():
            conn.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(name, like))
            for column, target in (("acknowledged_by", "users"), ("rule_id", "rules"),
                                   ("event_id", "events")):
                conn.execute(sql.SQL("ALTER TABLE {} ADD FOREIGN KEY ({}) REFERENCES {} (id)").format(
                    name, sql.Identifier(column), sql.Identifier(schema, target)))
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(name))


def ceiling_statement(schema: str) -> sql.Composed:
    return sql.SQL(
        """
        INSERT INTO {ceiling} (rule, subject_kind, subject_id, threshold, due_on, status,
                               local_date, rule_id, rule_version)
        SELECT 'rule:' || r.rule_id, 'subject', f.subject_id,
               'offset:' || CASE WHEN r.off > 0 THEN '+' ELSE '' END || r.off,
               d.due, 'claimed', %(today)s, r.rule_id, r.version
        FROM unnest(%(rule_ids)s::bigint[], %(versions)s::int[], %(facts)s::text[],
                    %(offsets)s::int[]) AS r (rule_id, version, fact, off)
        JOIN {fields} f ON f.name = r.fact
        CROSS JOIN LATERAL (SELECT (f.value #>> '{{}}')::date AS due) d
        WHERE d.due + r.off <= %(today)s
        ON CONFLICT DO NOTHING
        """).format(ceiling=sql.Identifier(schema, CEILING_TABLE),
                    fields=sql.Identifier(schema, "subject_fields"))


def ceiling_parameters(ob: Obligations, today: date) -> dict[str, Any]:
    flat = [(rule_id, version, w.fact, off)
            for (rule_id, version), w in zip(ob.rules, WATCHES, strict=True) for off in w.offsets]
    return {"today": today, "rule_ids": [f[0] for f in flat], "versions": [f[1] for f in flat],
            "facts": [f[2] for f in flat], "offsets": [f[3] for f in flat]}


def raw_ceiling(built: Sequence[Obligations], today: date, workers: int) -> tuple[int, float]:
    """Each tenant's one statement, ``workers`` connections taking tenants from a shared
    queue; timed from the first statement until the last has committed. Returns
    (rows inserted, seconds)."""
    work: queue.Queue[Obligations] = queue.Queue()
    for ob in built:
        work.put(ob)
    inserted = [0] * workers
    failures: list[BaseException] = []
    connections = [connect() for _ in range(workers)]
    start = threading.Barrier(workers + 1)

    def run(slot: int) -> None:
        conn = connections[slot]
        start.wait()
        try:
            while True:
                try:
                    ob = work.get_nowait()
                except queue.Empty:
                    return
                cur = conn.execute(ceiling_statement(ob.tenant.schema), ceiling_parameters(ob, today))
                inserted[slot] += cur.rowcount
        except BaseException as failure:  # reported by the main thread
            failures.append(failure)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    start.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for conn in connections:
        conn.close()
    if failures:
        raise failures[0]
    return sum(inserted), elapsed


# -- report ------------------------------------------------------------------------------


def verdict(value: float, goal: float) -> str:
    return "met" if value >= goal else "MISSED"


def report(facts: list[tuple[str, str]], args: argparse.Namespace, a: Figure, c: Figure,
           d: Figure, load_seconds: float) -> None:
    a_over_c = a.rate / c.rate if c.rate > 0 else float("inf")
    speedup = a.seconds / d.seconds if d.seconds > 0 else float("inf")
    machine = dict(facts)
    say()
    say("Figures (claims = ledger rows written; claims/s = claims / wall-clock seconds)")
    say(f"  {'measurement':<58} {'claims':>10} {'seconds':>9} {'claims/s':>10}")
    for fig in (a, c):
        say(f"  {fig.label:<58} {fig.rows:>10,} {fig.seconds:>9.3f} {fig.rate:>10,.0f}")
    say(f"  {d.label:<58} {d.rows:>10,} {d.seconds:>9.3f} {'-':>10}")
    say()
    say("Ratios")
    say(f"  a/c  scan / raw ceiling                   {a_over_c:8.3f}  "
        f"goal >= {GOAL_A_OVER_C:g}   {verdict(a_over_c, GOAL_A_OVER_C)}")
    say(f"  replay speed-up, time(a) / time(d)      {speedup:8.2f}x  "
        f"goal >= {GOAL_REPLAY_SPEEDUP:g}x    {verdict(speedup, GOAL_REPLAY_SPEEDUP)}")
    say()
    say("Markdown (for the README)")
    say()
    say(f"{args.tenants * args.subjects:,} obligations ({args.tenants} tenants x "
        f"{args.subjects:,} subjects, 3 time rules each, due dates within ±{args.spread} days), "
        f"loaded in {load_seconds:.0f}s; {machine['cpus']} CPUs, PostgreSQL "
        f"{machine['postgres'].split()[0]} "
        f"({'embedded' if machine['postgres service'].startswith('embedded') else 'system'}), "
        f"synchronous_commit={machine['synchronous_commit']}, {args.workers} worker thread(s); "
        f"load average at the end {os.getloadavg()[0]:.1f}.")
    say()
    say("| measurement | claims | seconds | claims/s |")
    say("|---|---:|---:|---:|")
    for fig in (a, c):
        say(f"| {fig.label} | {fig.rows:,} | {fig.seconds:.3f} | {fig.rate:,.0f} |")
    say(f"| {d.label} | {d.rows:,} | {d.seconds:.3f} | - |")
    say()
    say("| ratio | value | goal | |")
    say("|---|---:|---:|---|")
    say(f"| a/c (scan vs raw ceiling) | {a_over_c:.3f} | >= {GOAL_A_OVER_C:g} | "
        f"{verdict(a_over_c, GOAL_A_OVER_C)} |")
    say(f"| replay speed-up, time(a)/time(d) | {speedup:.2f}x | >= {GOAL_REPLAY_SPEEDUP:g}x | "
        f"{verdict(speedup, GOAL_REPLAY_SPEEDUP)} |")


# -- main --------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.obligations",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tenants", type=positive, default=100, help="tenants (100)")
    parser.add_argument("--subjects", type=positive, default=10_000,
                        help="subjects per tenant, one obligation each (10000)")
    parser.add_argument("--spread", type=positive, default=60,
                        help="due dates within this many days either side of the scan (60)")
    parser.add_argument("--as-of", type=parse_instant, default=None,
                        help="the scan's instant, ISO-8601 with an offset (default: now)")
    parser.add_argument("--workers", type=positive, default=os.cpu_count() or 1,
                        help="threads of the scanning worker and of the ceiling "
                             "(default: one per CPU)")
    parser.add_argument("--seed", type=int, default=1, help="random seed for the data (1)")
    parser.add_argument("--prefix", default="oblbench",
                        help="slug prefix of the bench tenants (oblbench)")
    parser.add_argument("--keep", action="store_true", help="keep the bench tenants afterwards")
    return parser.parse_args(argv)


def run(args: argparse.Namespace, embedded: bool) -> int:
    from db.platform.migrations import migrate_all
    from db.platform.pool import open_pool
    from tocsin import boot
    from tocsin.core.settings import load_settings
    from tocsin.messaging.broker import current_broker

    as_of: datetime = args.as_of or datetime.now(UTC)
    today = as_of.astimezone(UTC).date()
    settings = boot.start(load_settings())
    # As a worker process: the broker and the after-commit sends (the claims' preparation).
    boot.start_messaging(settings)
    open_pool(settings.database_url, max_size=max(settings.db_pool_max, args.workers),
              min_size=args.workers)
    migrate_all()
    conn = connect()
    problems: list[str] = []
    try:
        facts = machine_facts(conn, embedded)
        say("Machine")
        for name, value in facts:
            say(f"  {name:<20} {value}")
        say(f"  {'dramatiq namespace':<20} {os.environ['DRAMATIQ_NAMESPACE']}")
        say(f"Scan instant (as_of): {as_of.isoformat()}")
        dropped = drop_bench_tenants(conn, args.prefix)
        if dropped:
            say(f"Dropped {dropped} bench tenant(s) left by an earlier run")

        say(f"Building {args.tenants * args.subjects:,} obligations: {args.tenants} tenants x "
            f"{args.subjects:,} subjects, due dates {today} ±{args.spread} days, 3 time rules each")
        started = time.perf_counter()
        built = build(conn, args, today)
        load_seconds = time.perf_counter() - started
        tenants = [ob.tenant for ob in built]
        expected = expected_rows(conn, built, as_of)
        say(f"  domain/rules/obligation_dates.py yields {sum(expected.values()):,} ledger rows at as_of "
            f"({expected['claimed']:,} claimed + {expected['skipped']:,} skipped)")

        say(f"(a) scan: one scan_tenant message per tenant, through the broker, to a Dramatiq "
            f"worker with {args.workers} thread(s) ...")
        try_checkpoint(conn)
        _, a_seconds = project_scan(conn, tenants, as_of, args.workers)
        written = ledger_counts(conn, tenants)
        a_rows = sum(written.values())
        matches = written == expected
        say(f"    {a_rows:,} ledger rows ({written['claimed']:,} claimed + {written['skipped']:,} "
            f"skipped + {written['cancelled']:,} cancelled) in {a_seconds:.2f}s; "
            f"{'matches' if matches else 'DOES NOT MATCH'} domain/rules/obligation_dates.py")
        if not matches:
            problems.append(f"the scan wrote {dict(written)}, the cadence says {dict(expected)}")

        say("(d) replay of (a) at the same instant ...")
        try_checkpoint(conn)
        _, d_seconds = project_scan(conn, tenants, as_of, args.workers)
        after = ledger_counts(conn, tenants)
        d_rows = sum(after.values()) - a_rows
        say(f"    {d_rows:,} new ledger rows in {d_seconds:.2f}s "
            f"({'unchanged' if after == written else 'CHANGED'})")
        if after != written:
            problems.append(f"the replay changed the ledger: {dict(written)} -> {dict(after)}")

        say(f"(c) raw ceiling: per tenant one INSERT ... SELECT ... ON CONFLICT DO NOTHING, "
            f"{args.workers} connection(s) ...")
        create_ceiling_tables(conn, built)
        try_checkpoint(conn)
        c_rows, c_seconds = raw_ceiling(built, today, args.workers)
        say(f"    {c_rows:,} rows in {c_seconds:.2f}s (no conditions, zones or working days: "
            f"{c_rows - a_rows:+,} rows against (a))")

        threads = f"{args.workers} thread{'s' if args.workers != 1 else ''}"
        report(facts, args,
               Figure(f"(a) scan, {args.tenants} tenants, {threads}", a_rows, a_seconds),
               Figure(f"(c) raw ceiling, one INSERT ... SELECT per tenant, {threads}",
                      c_rows, c_seconds),
               Figure("(d) replay of (a), nothing new", d_rows, d_seconds),
               load_seconds)
    finally:
        # The claims' preparation messages were never meant to be consumed here.
        current_broker().flush_all()
        if not args.keep:
            say()
            say("Dropping the bench tenants (use --keep to keep them) ...")
            drop_bench_tenants(conn, args.prefix)
        else:
            say()
            say(f"Kept the bench tenants ({args.prefix}-*).")
        conn.close()
    for problem in problems:
        say(f"FAILED: {problem}")
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with bench_services(say) as embedded:
        return run(args, embedded)


if __name__ == "__main__":
    sys.exit(main())
