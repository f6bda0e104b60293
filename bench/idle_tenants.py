"""Part (5) of bench/tenants.py: ten thousand tenants, most of them idle at any tick.

``count`` tenants x ``clients`` clients, one tenant in ``due_every`` with a client whose d30
window opens a day after the first tick (so, due at the tick two days later), the others'
next window months away. Measured, each tick end to end (the clock's `tick` through the
broker to a real Dramatiq worker in this process, timed until the scan queue is empty):

  (5a) today's tick for the same setup: every tenant scanned (the summary made due for all,
       as a tick visited every tenant before it), then the backend memory of the worker's
       connections (RSS and pg_backend_memory_contexts), with the connections retired
       after DB_CONNECTION_MAX_SCHEMAS and, in a second such tick, never retired;
  (5b) the tick when one tenant in ``due_every`` has something due: the summary's tick;
  (5c) a tick with nothing due anywhere: the cost of an idle tenant per tick;
  (5d) a tenant's first scan (run_scan on a fresh pool, one tenant after another) against
       PostgreSQL's floor measured in the same run (bench/tenants.py postgres_floor).

The tenants are kept between runs (``--keep``): made once, their instant is fixed
(IDLE_AS_OF), so a later run only resets their summary. Making them: the first tenant's
schema is migrated (the real migrations, db/platform/migrations apply_tenant_migrations),
dumped with pg_dump (its DDL and the rows its migrations wrote), and that dump, with the
schema's name replaced, is run for every other tenant, a few tenants per transaction, on
``jobs`` connections at once, their migration records copied: what `tocsin migrate` would
have made, without planning and checking every migration 10,000 times (``--clone=no``
makes them with `tocsin migrate --jobs` instead). Progress is printed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from psycopg import sql

from bench.scan import TENANT_ZONES, BenchTenant, Connection, connect, say
from domain.people.identity import schema_for

__all__ = ["IDLE_AS_OF", "IDLE_PREFIX", "IdleFigures", "measure_idle_tenants", "prepare_idle_tenants",
           "report_idle"]

IDLE_PREFIX = "benchidle-"
IDLE_AS_OF = datetime(2031, 3, 3, 9, 0, tzinfo=UTC)  # the first tick; fixed, so data is reused
CHUNK = 250  # tenants per transaction when making or loading them
CLONES_PER_TX = 5  # tenants' DDL per transaction when cloning (each holds ~500 locks)
GOAL_TICK_SECONDS = 5.0
GOAL_IDLE_MS = 0.1
GOAL_FIRST_SCAN_OVER_FLOOR = 1.3
GOAL_BACKEND_MB = 256.0


@dataclass(frozen=True)
class IdleFigures:
    tenants: int
    clients_each: int
    due: int
    created_seconds: float | None  # None: reused from an earlier run
    full_tick: tuple[float, int]  # (seconds, tenants scanned): every tenant visited
    memory_retired: tuple[float, float, float]  # MB: max RSS (private), max contexts, backends
    memory_kept: tuple[float, float, float]
    due_tick: tuple[float, int]
    idle_tick: tuple[float, int]
    first_scan_ms: float
    floor_ms: float
    sweeps: tuple[tuple[float, int], tuple[float, int]] = ((0.0, 0), (0.0, 0))  # every tenant, then idle


def _tenants(conn: Connection, count: int) -> list[BenchTenant]:
    width = max(4, len(str(count)))
    slugs = [f"{IDLE_PREFIX}{n:0{width}d}" for n in range(1, count + 1)]
    return [BenchTenant(n, slug, schema_for(slug), TENANT_ZONES[(n - 1) % len(TENANT_ZONES)])
            for n, slug in enumerate(slugs, start=1)]


def _ready(conn: Connection, count: int) -> bool:
    """The tenants of an earlier run are there, migrated and loaded."""
    row = conn.execute(
        "SELECT count(*) FROM control.tenants t WHERE starts_with(t.slug, %s) AND EXISTS ("
        "  SELECT 1 FROM control.schema_migrations m WHERE m.schema_name = t.schema_name "
        "  AND m.version = '0060_next_work_triggers')", [IDLE_PREFIX]).fetchone()
    return row is not None and int(str(row[0])) == count


@contextmanager
def _durability_off(conn: Connection, embedded: bool) -> Iterator[None]:
    """While making the schemas, on the bench's own (embedded) PostgreSQL only: no fsync and
    no waiting for the WAL at commit (bench data need not survive a power cut; what is
    measured afterwards runs with the server's settings again)."""
    if not embedded:
        yield
        return
    for name, value in (("fsync", "off"), ("synchronous_commit", "off")):
        conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
    conn.execute("SELECT pg_reload_conf()")
    try:
        yield
    finally:
        for name in ("fsync", "synchronous_commit"):
            conn.execute(sql.SQL("ALTER SYSTEM RESET {}").format(sql.Identifier(name)))
        conn.execute("SELECT pg_reload_conf()")
        conn.execute("CHECKPOINT")


def _pg_dump() -> str:
    """pg_dump of the embedded server's own version (pgserver's), else the one on PATH."""
    try:
        import pgserver

        bundled = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_dump"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    found = shutil.which("pg_dump")
    if found is None:
        raise SystemExit("pg_dump not found: install PostgreSQL's client tools, or use --clone=no")
    return found


def _template_ddl(conn: Connection, template: str) -> str:
    """The migrated ``template`` schema as SQL: its objects and the rows its migrations
    wrote (as INSERTs, so the text runs as one multi-statement query)."""
    from tocsin.core.settings import load_settings

    done = subprocess.run([_pg_dump(), "--dbname", load_settings().database_url, "--schema", template,
                           "--no-owner", "--no-privileges", "--inserts", "--no-comments"],
                          stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"pg_dump of the template schema failed: exit {done.returncode}")
    lines = [line for line in done.stdout.splitlines()
             if not line.startswith(("--", "\\")) and "pg_catalog.set_config('search_path'" not in line]
    return "\n".join(lines)


def _clone(conn: Connection, tenants: Sequence[BenchTenant], jobs: int) -> None:
    """The first tenant's schema migrated for real, then its dump run for every other one
    (see the module's docstring), ``jobs`` connections at once."""
    from db.platform.migrations import apply_tenant_migrations

    template = tenants[0].schema
    mark = time.perf_counter()
    with conn.transaction():
        apply_tenant_migrations(conn, template)
    migrated = time.perf_counter() - mark
    ddl = _template_ddl(conn, template)
    say(f"    the first schema migrated in {migrated:.1f}s, dumped in "
        f"{time.perf_counter() - mark - migrated:.1f}s ({len(ddl) // 1024} kB of SQL)")
    # The dump names the template schema, quoted or not; every other name keeps its own.
    create = f"CREATE SCHEMA {template};"
    body = ddl.replace(create, "")
    pattern = re.compile(rf"\b{re.escape(template)}\b")
    versions = [str(r[0]) for r in conn.execute(
        "SELECT version FROM control.schema_migrations WHERE schema_name = %s", [template])]
    rest = list(tenants[1:])
    made = [0]
    lock = threading.Lock()
    errors: list[BaseException] = []
    started = time.perf_counter()

    def work(part: Sequence[BenchTenant]) -> None:
        try:
            with connect() as own:
                for first in range(0, len(part), CLONES_PER_TX):
                    batch = part[first:first + CLONES_PER_TX]
                    with own.transaction():
                        own.execute(";\n".join(pattern.sub(t.schema, body) for t in batch))
                        with own.cursor() as cur:
                            cur.executemany(
                                "INSERT INTO control.schema_migrations (schema_name, version) "
                                "VALUES (%s, %s)", [(t.schema, v) for t in batch for v in versions])
                    with lock:
                        made[0] += len(batch)
                        if made[0] % 1000 < CLONES_PER_TX:
                            say(f"    cloned {made[0]:,}/{len(rest):,} schemas "
                                f"({time.perf_counter() - started:.0f}s)")
        except BaseException as error:  # reported by the caller's thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(rest[n::jobs],)) for n in range(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    cloned = time.perf_counter() - started
    say(f"    {len(rest):,} schemas cloned in {cloned:.0f}s, "
        f"{1000 * cloned / max(1, len(rest)):.1f} ms per schema")


def _make(conn: Connection, tenants: Sequence[BenchTenant], jobs: int, clone: bool = True) -> float:
    from tests.support.many_tenants import remove_tenants_like

    removed = remove_tenants_like(conn, IDLE_PREFIX)
    if removed:
        say(f"    removed {removed:,} tenants of an unfinished earlier run")
    started = time.perf_counter()
    for first in range(0, len(tenants), CHUNK):
        part = tenants[first:first + CHUNK]
        with conn.transaction():
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO control.tenants (slug, name, schema_name, time_zone, status) "
                    "VALUES (%s, %s, %s, %s, 'suspended')",
                    [(t.slug, f"Tenant {t.slug}", t.schema, t.time_zone) for t in part])
            conn.execute(sql.SQL(" ").join(
                sql.SQL("CREATE SCHEMA {};").format(sql.Identifier(t.schema)) for t in part))
    if clone:
        say(f"    {len(tenants):,} tenant rows and empty schemas in {time.perf_counter() - started:.0f}s; "
            f"migrating the first and cloning it, {jobs} connections ...")
        _clone(conn, tenants, jobs)
        return time.perf_counter() - started
    say(f"    {len(tenants):,} tenant rows and empty schemas in {time.perf_counter() - started:.0f}s; "
        f"`tocsin migrate --jobs {jobs}` ...")
    tocsin = Path(sys.executable).parent / "tocsin"
    done = subprocess.run([str(tocsin), "migrate", "--jobs", str(jobs)], stdout=subprocess.PIPE,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"tocsin migrate --jobs {jobs} failed: exit {done.returncode}")
    say(f"    {done.stdout.strip()}")
    return time.perf_counter() - started


def _load(conn: Connection, tenants: Sequence[BenchTenant], clients: int, due_every: int) -> int:
    """``clients`` clients a tenant, expiring 200-349 days after IDLE_AS_OF; in one tenant of
    ``due_every`` the first expires 31 days after it instead (its d30 window opens the next
    day). Returns how many tenants have something due two days after IDLE_AS_OF."""
    today = IDLE_AS_OF.date()
    started = time.perf_counter()
    due = 0
    for first in range(0, len(tenants), CHUNK):
        part = tenants[first:first + CHUNK]
        with conn.transaction(), conn.pipeline():
            for t in part:
                rows = []
                for k in range(clients):
                    days = 200 + (t.number * 7 + k * 13) % 150
                    if k == 0 and t.number % due_every == 0:
                        days = 31
                    rows.append((f"Client {k}", "enterprise" if k % 4 == 0 else "standard",
                                 today + timedelta(days=days)))
                values = sql.SQL(", ").join(sql.SQL("({}, {}, {})").format(
                    sql.Literal(n), sql.Literal(p), sql.Literal(e)) for n, p, e in rows)
                conn.execute(sql.SQL("INSERT INTO {}.clients (name, plan, access_expires_on) "
                                     "VALUES ").format(sql.Identifier(t.schema)) + values)
                due += t.number % due_every == 0
        if (first // CHUNK) % 8 == 7:
            say(f"    loaded {first + len(part):,}/{len(tenants):,} tenants "
                f"({time.perf_counter() - started:.0f}s)")
    return due


def _reset_summary(conn: Connection) -> None:
    """As before the summary: no instant known, nothing scanned (the runs' records)."""
    for table in ("control.next_work", "control.completed_runs"):
        conn.execute(sql.SQL("DELETE FROM {} WHERE tenant_id IN (SELECT id FROM control.tenants "
                             "WHERE starts_with(slug, %s))").format(sql.SQL(table)), [IDLE_PREFIX])


def _all_due(conn: Connection) -> None:
    conn.execute("UPDATE control.next_work SET next_scan_at = '-infinity' WHERE tenant_id IN "
                 "(SELECT id FROM control.tenants WHERE starts_with(slug, %s))", [IDLE_PREFIX])


def _timed_tick(conn: Connection, as_of: datetime, workers: int) -> tuple[float, int]:
    """The clock's tick to a real worker; (seconds until the scan queue is empty, tenants
    whose scan completed meanwhile)."""
    from actors.scan import tick
    from bench.tenants import run_on_worker

    since = conn.execute("SELECT clock_timestamp()").fetchone()
    assert since is not None
    elapsed = run_on_worker("scan", lambda: tick.send(as_of.isoformat()), workers)
    row = conn.execute(
        "SELECT count(*) FROM control.completed_runs r JOIN control.tenants t ON t.id = r.tenant_id "
        "WHERE starts_with(t.slug, %s) AND r.kind = 'scan' AND r.completed_at >= %s",
        [IDLE_PREFIX, since[0]]).fetchone()
    assert row is not None
    return elapsed, int(str(row[0]))


def load_average() -> str:
    """The machine's load average (1, 5, 15 minutes): the figures depend on it."""
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def _timed_sweep(conn: Connection, workers: int) -> tuple[float, int]:
    """The clock's sweep to a real worker; (seconds until the sweep queue is empty, tenants
    whose sweep completed meanwhile)."""
    from actors.sweep import sweep
    from bench.tenants import run_on_worker

    since = conn.execute("SELECT clock_timestamp()").fetchone()
    assert since is not None
    elapsed = run_on_worker("sweep", sweep.send, workers)
    row = conn.execute(
        "SELECT count(*) FROM control.completed_runs r JOIN control.tenants t ON t.id = r.tenant_id "
        "WHERE starts_with(t.slug, %s) AND r.kind = 'sweep' AND r.completed_at >= %s",
        [IDLE_PREFIX, since[0]]).fetchone()
    assert row is not None
    return elapsed, int(str(row[0]))


_GRAND_TOTAL = re.compile(r"\[(\d+)\].*Grand total: (\d+) bytes")


def _backend_memory(conn: Connection, log: Path | None) -> tuple[float, float, float]:
    """(max private RSS in MB, max pg_backend_memory_contexts total in MB, backends) over
    this process's pool connections: every client backend but the bench's own."""
    pids = [int(str(r[0])) for r in conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND backend_type = 'client backend' AND pid <> pg_backend_pid()").fetchall()]
    rss = 0.0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        found = re.search(r"RssAnon:\s+(\d+) kB", status)
        if found:
            rss = max(rss, int(found.group(1)) / 1024)
    contexts = 0.0
    if log is not None and log.exists():
        mark = log.stat().st_size
        for pid in pids:
            conn.execute("SELECT pg_log_backend_memory_contexts(%s)", [pid])
        deadline = time.monotonic() + 10
        seen: dict[int, int] = {}
        while time.monotonic() < deadline and len(seen) < len(pids):
            time.sleep(0.2)
            with log.open("rb") as f:
                f.seek(mark)
                text = f.read().decode(errors="replace")
            seen = {int(p): int(b) for p, b in _GRAND_TOTAL.findall(text)}
        if seen:
            contexts = max(seen.values()) / 1024 / 1024
    return rss, contexts, float(len(pids))


def _first_scans(tenants: Sequence[BenchTenant], as_of: datetime, workers: int) -> float:
    """ms per tenant of run_scan, one tenant after another, on a pool opened afresh."""
    from db.notices.scan import run_scan
    from db.platform.pool import close_pool, open_pool
    from tocsin.core.settings import load_settings

    close_pool()
    open_pool(load_settings().database_url, max_size=max(2, workers), min_size=1)
    started = time.perf_counter()
    for t in tenants:
        run_scan(t.slug, as_of)
    return 1000 * (time.perf_counter() - started) / len(tenants)


def prepare_idle_tenants(conn: Connection, count: int, clients: int, due_every: int, jobs: int,
                         embedded: bool, clone: bool = True) -> tuple[list[BenchTenant], int, float | None]:
    """Part (5)'s tenants, made and loaded, or kept from an earlier run: (tenants, how many
    have something due at (5b), seconds it took to make them or None when reused)."""
    tenants = _tenants(conn, count)
    if _ready(conn, count):
        say(f"(5) {count:,} tenants kept from an earlier run (--keep): reused")
        return tenants, sum(1 for t in tenants if t.number % due_every == 0), None
    say(f"(5) {count:,} tenants x {clients} clients: making them (kept with --keep) ...")
    with _durability_off(conn, embedded):
        created = _make(conn, tenants, jobs, clone)
        say(f"    made in {created:.0f}s, {1000 * created / count:.1f} ms per tenant; loading ...")
        due = _load(conn, tenants, clients, due_every)
    return tenants, due, created


def measure_idle_tenants(conn: Connection, count: int, clients: int, due_every: int,
                         workers: int, jobs: int, log: Path | None, clone: bool = True) -> IdleFigures:
    from bench.tenants import postgres_floor, set_status
    from tocsin import boot
    from tocsin.core import runtime

    tenants, due, created = prepare_idle_tenants(conn, count, clients, due_every, jobs,
                                                 log is not None, clone)
    _reset_summary(conn)
    set_status(conn, IDLE_PREFIX, "active")
    settings = runtime.settings()
    try:
        say(f"(5a) today's tick: every one of the {count:,} tenants scanned (load {load_average()}) ...")
        first = _timed_tick(conn, IDLE_AS_OF, workers)  # no summary yet: every tenant
        say(f"    first tick ever (cold): {first[0]:.2f}s for {first[1]:,} tenants")
        _all_due(conn)
        full = _timed_tick(conn, IDLE_AS_OF + timedelta(hours=1), workers)
        retired = _backend_memory(conn, log)
        say(f"    every tenant due, as before the summary: {full[0]:.2f}s for {full[1]:,} tenants; "
            f"backends (connections retired after {settings.db_connection_max_schemas} schemas): "
            f"max {retired[0]:.0f} MB private RSS, max {retired[1]:.0f} MB memory contexts, "
            f"{retired[2]:.0f} backends")
        boot.start(replace(settings, db_connection_max_schemas=0))
        _all_due(conn)
        _timed_tick(conn, IDLE_AS_OF + timedelta(hours=2), workers)
        kept = _backend_memory(conn, log)
        say(f"    the same tick with connections never retired: max {kept[0]:.0f} MB private RSS, "
            f"max {kept[1]:.0f} MB memory contexts, {kept[2]:.0f} backends")
        boot.start(settings)
        say(f"(5b) the tick two days later, {due:,} tenants with something due ...")
        due_tick = _timed_tick(conn, IDLE_AS_OF + timedelta(days=2), workers)
        say(f"    {due_tick[0]:.2f}s, {due_tick[1]:,} tenants scanned")
        say(f"(5c) a tick with nothing due (load {load_average()}) ...")
        idle_tick = _timed_tick(conn, IDLE_AS_OF + timedelta(days=2, minutes=15), workers)
        say(f"    {idle_tick[0]:.3f}s, {idle_tick[1]:,} tenants scanned: "
            f"{1000 * idle_tick[0] / count:.4f} ms per idle tenant")
        say("(5e) the sweep: every tenant (never swept, or the broker's marker missing), then "
            "the next sweep with the summary ...")
        sweeps = (_timed_sweep(conn, workers), _timed_sweep(conn, workers))
        say(f"    every tenant: {sweeps[0][0]:.2f}s ({sweeps[0][1]:,} sweeps); the next: "
            f"{sweeps[1][0]:.3f}s ({sweeps[1][1]:,} sweeps)")
        sample = tenants[:: max(1, count // 300)]
        say(f"(5d) first scan against the floor, {len(sample)} tenants one after another "
            f"(load {load_average()}) ...")
        floor = postgres_floor(sample, IDLE_AS_OF + timedelta(days=2, hours=1))
        first_ms = _first_scans(sample, IDLE_AS_OF + timedelta(days=2, hours=1), workers)
        say(f"    run_scan {first_ms:.2f} ms per tenant on a fresh pool; the floor {floor[0]:.2f} ms "
            f"(fresh connection): {first_ms / floor[0]:.2f}x")
    finally:
        boot.start(settings)
        set_status(conn, IDLE_PREFIX, "suspended")
    return IdleFigures(count, clients, due, created, full, retired, kept, due_tick, idle_tick,
                       first_ms, floor[0], sweeps)


def report_idle(f: IdleFigures) -> None:
    def verdict(met: bool) -> str:
        return "met" if met else "MISSED"

    per_idle = 1000 * f.idle_tick[0] / f.tenants
    ratio = f.first_scan_ms / f.floor_ms
    say()
    say(f"| {f.tenants:,} tenants x {f.clients_each} clients | value |")
    say("|---|---:|")
    say(f"| load average at the end (1 / 5 / 15 min) | {load_average()} |")
    if f.created_seconds is not None:
        say(f"| made (one schema migrated, cloned for the others) | {f.created_seconds:.0f}s, "
            f"{1000 * f.created_seconds / f.tenants:.1f} ms per tenant |")
    say(f"| tick, every tenant scanned (today's tick) | {f.full_tick[0]:.2f}s ({f.full_tick[1]:,} scans) |")
    say(f"| tick, {f.due:,} tenants due, the summary's (goal < {GOAL_TICK_SECONDS:g} s) | "
        f"{f.due_tick[0]:.2f}s ({f.due_tick[1]:,} scans, {verdict(f.due_tick[0] < GOAL_TICK_SECONDS)}) |")
    say(f"| idle tenant per tick (goal <= {GOAL_IDLE_MS:g} ms) | {per_idle:.4f} ms "
        f"({f.idle_tick[0]:.3f}s for {f.tenants:,}, {verdict(per_idle <= GOAL_IDLE_MS)}) |")
    say(f"| sweep, every tenant (no summary yet) | {f.sweeps[0][0]:.2f}s ({f.sweeps[0][1]:,} sweeps) |")
    say(f"| the next sweep, the summary's | {f.sweeps[1][0]:.3f}s ({f.sweeps[1][1]:,} sweeps) |")
    say(f"| first scan against the floor (goal <= {GOAL_FIRST_SCAN_OVER_FLOOR:g}x) | "
        f"{f.first_scan_ms:.2f} ms / {f.floor_ms:.2f} ms = {ratio:.2f}x "
        f"({verdict(ratio <= GOAL_FIRST_SCAN_OVER_FLOOR)}) |")
    say(f"| backend memory after the full tick, connections retired (goal < {GOAL_BACKEND_MB:g} MB) | "
        f"max {f.memory_retired[0]:.0f} MB private RSS, {f.memory_retired[1]:.0f} MB contexts "
        f"({verdict(max(f.memory_retired[:2]) < GOAL_BACKEND_MB)}) |")
    say(f"| the same, connections never retired | max {f.memory_kept[0]:.0f} MB private RSS, "
        f"{f.memory_kept[1]:.0f} MB contexts |")
