"""The evidence chain's cost and its verification speed: figures, not a timed test.

    python -m bench.evidence [--clients 30000] [--tenants 6] [--events 3000] [--event-tenants 6]
                             [--workers 2] [--verify-facts 300000]

The chain's two possible designs, each measured in the same run against no chain at all,
on identical data (one set of tenants per design, built from the same seeds):

- ``off``: the evidence triggers disabled (what Tocsin did before the chain);
- ``sealer`` (Tocsin's design): writers append their facts to ``evidence_pending`` in their
  own transaction, and a sealer links them into the chain after commit (here a thread sealing
  the tenants of the run in a loop, competing for the same CPUs);
- ``inline``: the per-tenant head locked in the writing transaction: a trigger on
  ``evidence_pending`` seals the writer's facts into the chain before it commits, so every
  writer of a tenant waits for the head until the one holding it commits.

Workloads:
- scan: the licence scan as bench/scan.py (a) runs it, one scan_tenant message per tenant
  through Redis to a Dramatiq worker with --workers threads; claims/s;
- events: host events recorded beforehand (bench/events.py's tenants: the fraud product,
  one rule, one analyst), then the relay and preparation through a Dramatiq worker with
  --workers threads, timed until every claim has its inbox row; rule claims/s;
- verify: one tenant with --verify-facts chained facts, verified as `tocsin evidence verify`
  does; records/s.

Without DATABASE_URL / REDIS_URL it starts embedded services under .tocsin/bench.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import sql

from bench.scan import SLUG_PREFIX, client_rows, connect, drop_bench_objects, project_scan, try_checkpoint
from bench.services import bench_services

MODES = ("off", "sealer", "inline")
EVIDENCE_TRIGGERS = (
    ("notification_ledger", "evidence_claims"),
    ("notification_ledger", "evidence_claim_status"),
    ("notification_ledger", "evidence_delivered"),
    ("notification_ledger", "evidence_acknowledged"),
    ("notification_deliveries", "evidence_deliveries"),
    ("notification_deliveries", "evidence_delivery_status"),
    ("delivery_attempts", "evidence_attempts"),
    ("delivery_attempts", "evidence_attempt_outcome"),
    ("delivery_events", "evidence_provider_events"),
    ("rule_versions", "evidence_rule_versions"),
)
# The inline design: the writer seals its own facts before it commits, holding the head.
INLINE = """
CREATE OR REPLACE FUNCTION {schema}.evidence_seal_inline() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN PERFORM evidence_seal(1000000000); RETURN NULL; END $$;
CREATE TRIGGER evidence_seal_inline AFTER INSERT ON {schema}.evidence_pending
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.evidence_seal_inline();
"""
EV_PREFIX = "evchain"


def say(text: str = "") -> None:
    print(text, flush=True)


def set_mode(conn: psycopg.Connection[Any], schema: str, mode: str) -> None:
    for table, trigger in EVIDENCE_TRIGGERS:
        conn.execute(
            sql.SQL("ALTER TABLE {} {} TRIGGER {}").format(
                sql.Identifier(schema, table),
                sql.SQL("DISABLE" if mode == "off" else "ENABLE"),
                sql.Identifier(trigger),
            )
        )
    if mode == "inline":
        conn.execute(sql.SQL(INLINE.replace("{schema}", "{0}")).format(sql.Identifier(schema)))


class Sealer:
    """The sealer design's background work, competing for the CPUs while a phase runs."""

    def __init__(self, slugs: Sequence[str]) -> None:
        self.slugs, self.stop, self.sealed = list(slugs), threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from db.evidence.chain import seal_tenant

        while not self.stop.is_set():
            for slug in self.slugs:
                self.sealed += seal_tenant(slug)
            self.stop.wait(0.5)  # seconds: EVIDENCE_SEAL_SECONDS is 2 by default

    def __enter__(self) -> Sealer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def seal_rest(slugs: Sequence[str]) -> tuple[int, float]:
    from db.evidence.chain import seal_tenant

    started = time.perf_counter()
    return sum(seal_tenant(s) for s in slugs), time.perf_counter() - started


def chained(conn: psycopg.Connection[Any], schemas: Sequence[str]) -> tuple[int, int]:
    """(chained records, pending facts) over these schemas."""
    total = [0, 0]
    for schema in schemas:
        row = conn.execute(
            sql.SQL("SELECT (SELECT count(*) FROM {}), (SELECT count(*) FROM {})").format(
                sql.Identifier(schema, "evidence_chain"), sql.Identifier(schema, "evidence_pending")
            )
        ).fetchone()
        assert row is not None
        total = [total[0] + int(row[0]), total[1] + int(row[1])]
    return total[0], total[1]


# --- scan -------------------------------------------------------------------------------


def build_scan_tenants(
    conn: psycopg.Connection[Any], mode_no: int, clients: int, tenants: int, as_of: datetime
) -> list[Any]:
    from bench.scan import BenchTenant
    from db.platform.tenancy import create_tenant

    built = []
    for n in range(1, tenants + 1):
        tenant = create_tenant(f"{SLUG_PREFIX}{mode_no}{n:04d}", f"Chain bench {n}", "Europe/London")
        conn.execute("UPDATE control.tenants SET status = 'suspended' WHERE id = %s", [tenant.id])
        rows = client_rows(random.Random(100_003 + n), n, clients // tenants, as_of.date())
        with conn.transaction(), conn.cursor() as cur, cur.copy(
            sql.SQL("COPY {} (name, plan, access_expires_on, time_zone) FROM STDIN").format(
                sql.Identifier(tenant.schema, "clients")
            )
        ) as copy:
            for row in rows:
                copy.write_row(row)
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(tenant.schema, "clients")))
        built.append(BenchTenant(n, tenant.slug, tenant.schema, tenant.time_zone))
    return built


def scan_phase(conn: psycopg.Connection[Any], args: argparse.Namespace, as_of: datetime) -> dict[str, float]:
    rates: dict[str, float] = {}
    sets = {
        mode: build_scan_tenants(conn, n, args.clients, args.tenants, as_of)
        for n, mode in enumerate(MODES, start=1)
    }
    say(f"scan: {args.clients:,} clients in {args.tenants} tenants per design")
    for mode in MODES:
        tenants = sets[mode]
        for t in tenants:
            set_mode(conn, t.schema, mode)
        try_checkpoint(conn)
        if mode == "sealer":
            with Sealer([t.slug for t in tenants]):
                totals, seconds = project_scan(conn, tenants, as_of, args.workers)
        else:
            totals, seconds = project_scan(conn, tenants, as_of, args.workers)
        rest, rest_seconds = seal_rest([t.slug for t in tenants]) if mode != "off" else (0, 0.0)
        records, pending = chained(conn, [t.schema for t in tenants])
        rates[mode] = totals.claims / seconds
        say(
            f"  {mode:<7} {totals.claims:,} claims in {seconds:.2f}s = {rates[mode]:,.0f} claims/s; "
            f"chain {records:,} records ({rest:,} sealed after the scan in {rest_seconds:.2f}s), "
            f"{pending} pending"
        )
    return rates


# --- events -----------------------------------------------------------------------------


def events_phase(conn: psycopg.Connection[Any], args: argparse.Namespace) -> dict[str, float]:
    import dramatiq

    from actors.relay import relay_tick
    from bench.events import build_tenants, case
    from tocsin.core import runtime
    from tocsin.messaging.broker import install_broker
    from tocsin.shell.outbox import record_event

    broker = install_broker(runtime.settings())
    rates: dict[str, float] = {}
    per_tenant = args.events // args.event_tenants
    say(
        f"events: {per_tenant * args.event_tenants:,} host events over {args.event_tenants} "
        "tenants per design"
    )
    for mode in MODES:
        made = build_tenants(conn, args.event_tenants, f"{EV_PREFIX}{mode}")
        for schema in made.schemas:
            set_mode(conn, schema, mode)
        with psycopg.connect(runtime.settings().database_url) as host:
            for slug in made.slugs:
                for n in range(per_tenant):
                    record_event(host, slug, case(f"{slug}-{n}"))
                host.commit()
        try_checkpoint(conn)
        worker = dramatiq.Worker(broker, worker_threads=args.workers, worker_timeout=20)
        worker.start()
        sealer = Sealer(made.slugs) if mode == "sealer" else None
        try:
            if sealer:
                sealer.__enter__()
            started = time.perf_counter()
            relay_tick.send()
            total = per_tenant * args.event_tenants
            while prepared(conn, made.schemas) < total:
                time.sleep(0.02)
                if time.perf_counter() - started > 20 * 60:
                    raise SystemExit("events: not all claims prepared after 20 minutes")
            seconds = time.perf_counter() - started
        finally:
            if sealer:
                sealer.__exit__()
            worker.stop()
        rest, rest_seconds = seal_rest(made.slugs) if mode != "off" else (0, 0.0)
        records, pending = chained(conn, made.schemas)
        rates[mode] = total / seconds
        say(
            f"  {mode:<7} {total:,} rule claims prepared in {seconds:.2f}s = {rates[mode]:,.0f} claims/s; "
            f"chain {records:,} records ({rest:,} sealed afterwards in {rest_seconds:.2f}s), "
            f"{pending} pending"
        )
    return rates


def prepared(conn: psycopg.Connection[Any], schemas: Sequence[str]) -> int:
    total = 0
    for s in schemas:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE prepared_at IS NOT NULL").format(
            sql.Identifier(s, "notification_ledger"))).fetchone()
        assert row is not None
        total += int(row[0])
    return total


# --- verify -----------------------------------------------------------------------------


def verify_phase(conn: psycopg.Connection[Any], facts: int) -> float:
    from db.evidence.chain import seal_tenant
    from db.evidence.verify import verify_tenant
    from db.platform.tenancy import create_tenant

    tenant = create_tenant(f"{SLUG_PREFIX}9001", "Verify bench", "UTC")
    conn.execute("UPDATE control.tenants SET status = 'suspended' WHERE id = %s", [tenant.id])
    schema = sql.Identifier(tenant.schema)
    claims = facts // 3  # each claim also gets a delivered and an acknowledged fact
    say(f"verify: {claims:,} claims, each delivered and acknowledged ({claims * 3:,} facts)")
    with conn.transaction():
        conn.execute(
            sql.SQL(
                "INSERT INTO {0}.notification_ledger "
                "(rule, subject_kind, subject_id, threshold, due_on, local_date) "
                "SELECT 'licence', 'client', n, 'd7', date '2027-01-01' + (n %% 300), date '2026-12-01' "
                "FROM generate_series(1, %s) n"
            ).format(schema),
            [claims],
        )
        conn.execute(sql.SQL("UPDATE {0}.notification_ledger SET delivered_at = now()").format(schema))
        conn.execute(
            sql.SQL("INSERT INTO {0}.users (email, role) VALUES ('reader@bench.example', 'admin')").format(
                schema
            )
        )
        conn.execute(
            sql.SQL(
                "UPDATE {0}.notification_ledger SET acknowledged_at = now(), "
                "acknowledged_by = (SELECT min(id) FROM {0}.users)"
            ).format(schema)
        )
    seal_tenant(tenant.slug, max_rows=50_000)
    best = 0.0
    for n in range(4):  # the first run also starts the verifier's processes: shown, not counted
        started, cpu = time.perf_counter(), verifier_cpu()
        report = verify_tenant(tenant.slug)
        seconds, cpu_seconds = time.perf_counter() - started, verifier_cpu() - cpu
        assert report.ok, report.first_break
        rate = report.records / seconds
        if n:
            best = max(best, rate)
        say(f"  {report.records:,} records and {report.rows:,} rows verified in {seconds:.2f}s "
            f"= {rate:,.0f} records/s wall; the verifier's own CPU (its processes, PostgreSQL's "
            f"aside) {cpu_seconds:.2f}s = {report.records / max(cpu_seconds, 1e-9):,.0f} records per "
            f"CPU-second (load average {os.getloadavg()[0]:.1f}){'' if n else ', first run: not counted'}")
    return best


def verifier_cpu() -> float:
    """CPU seconds of this process and of the verifier's part processes (db/evidence/verify_parts.py),
    read from /proc: they outlive a verification, so resource's RUSAGE_CHILDREN never counts them."""
    from db.evidence import verify_parts

    total = time.process_time()
    pool = verify_parts._pool
    for pid in list(getattr(pool, "_processes", None) or {}):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return total


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=30_000, help="clients per design (30,000)")
    parser.add_argument("--tenants", type=int, default=6, help="tenants per design for the scan (6)")
    parser.add_argument("--events", type=int, default=3_000, help="host events per design (3,000)")
    parser.add_argument("--event-tenants", type=int, default=6, help="tenants per design for events (6)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="worker threads (CPUs)")
    parser.add_argument("--verify-facts", type=int, default=300_000, help="facts to verify (300,000)")
    parser.add_argument("--only", default="scan,events,verify", help="phases (scan,events,verify)")
    return parser.parse_args(argv)


def ratio_line(label: str, rates: dict[str, float]) -> str:
    off = rates["off"]
    return (
        f"| {label} | {off:,.0f} | {rates['sealer']:,.0f} ({rates['sealer'] / off:.2f}) | "
        f"{rates['inline']:,.0f} ({rates['inline'] / off:.2f}) |"
    )


def run(args: argparse.Namespace) -> None:
    from bench.events import drop_bench_tenants
    from db.platform.migrations import migrate_all
    from db.platform.pool import open_pool
    from tests.support.many_tenants import remove_tenants_like
    from tocsin.core.settings import load_settings

    settings = load_settings()
    open_pool(settings.database_url, max_size=max(settings.db_pool_max, args.workers + 2), min_size=2)
    migrate_all()
    conn = connect()
    phases = set(args.only.split(","))
    cleanup: list[Callable[[], object]] = [
        lambda: drop_bench_objects(conn),
        lambda: drop_bench_tenants(conn),
        lambda: remove_tenants_like(conn, EV_PREFIX),
    ]
    for clean in cleanup:
        clean()
    version = conn.execute("SHOW server_version").fetchone()
    say(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"PostgreSQL {version[0] if version else '?'}, load average {os.getloadavg()[0]:.1f}"
    )
    say(
        f"Date: {datetime.now(UTC):%Y-%m-%d %H:%M}Z; other work may be running on this machine: "
        "compare the ratios, measured in the same run, more than the absolute figures"
    )
    try:
        lines = ["| workload | no chain | sealer (ratio) | head locked inline (ratio) |", "|---|---|---|---|"]
        if "scan" in phases:
            lines.append(ratio_line("licence scan, claims/s", scan_phase(conn, args, datetime.now(UTC))))
        if "events" in phases:
            lines.append(ratio_line("events to prepared claims, claims/s", events_phase(conn, args)))
        verified = verify_phase(conn, args.verify_facts) if "verify" in phases else None
        say()
        for line in lines if len(lines) > 2 else []:
            say(line)
        if verified is not None:
            say(
                f"verify: best {verified:,.0f} records/s (goal >= 100,000: "
                f"{'met' if verified >= 100_000 else 'NOT MET'})"
            )
    finally:
        for clean in cleanup:
            clean()
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with bench_services(say):
        run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
