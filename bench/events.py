"""Events in, end to end: how long from an event's commit to the committed inbox row, and
whether one tenant's backlog makes the others wait.

Sections (all by default; pick with --only):
- latency: a steady 100 events/s spread over 50 tenants, sent through the HTTP events API
  (one request per event, as an integrating product sends them) to the Procfile's processes
  (`tocsin web`, `tocsin worker`, `tocsin clock`); each event's clock starts just before its
  request is sent (so the figure includes the API's own commit: an upper bound) and stops
  when an observer polling the tenants' inbox tables every 25 ms first sees its inbox row.
  Run twice: with the after-commit wake-up (goal p99 < 500 ms) and without it, where only
  the polling fallback finds the events (goal p99 <= EVENTS_POLL_SECONDS + 500 ms).
- fairness: 1,000 tenants, one of them with a backlog of 100,000 events, while 20 events/s
  go to the others at random: the others' p99 (goal < 2 s).
- intake: events/s through the batch API against a raw INSERT of the same rows
  (bench/events_intake.py; goal >= 0.3 of the raw ceiling).
- rules: targeted loading against loading every fact (bench/rules_loading.py; goal >= 5x).

    python -m bench.events [--only latency,fairness,intake,rules] [--seconds 30] [--wakeup on,off]

Without DATABASE_URL / REDIS_URL it starts embedded services under .tocsin/bench.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

from bench.services import BENCH_HOME, bench_services, wait_ready

PREFIX = "evbench"
LOGS = BENCH_HOME / "events-logs"
RULE: dict[str, Any] = {
    "name": "Every case", "product": "fraud", "kind": "created", "trigger": {},
    "conditions": {"all": [{"fact": "field.amount", "op": "greater", "value": 0}]},
    "actions": {"channels": ["in_app"], "category": "case_alert", "recipients": [{"type": "assignees"}],
                "template": {"title": "Case {{ subject.external_id }}", "body": "{{ field.amount }}"}},
}
ASSIGNEE = "analyst@bench.example"
OBSERVER = "evbench-observer"  # the observer's application_name: its backend is not the pipeline's


def say(text: str = "") -> None:
    print(text, flush=True)


@dataclass
class Tenants:
    slugs: list[str]
    schemas: list[str]
    keys: list[str]


def drop_bench_tenants(conn: psycopg.Connection[Any]) -> int:
    rows = conn.execute("SELECT id, schema_name FROM control.tenants WHERE starts_with(slug, %s)",
                        [PREFIX]).fetchall()
    for tenant_id, schema in rows:
        with conn.transaction():
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(str(schema))))
            for table in ("schema_migrations",):
                conn.execute(sql.SQL("DELETE FROM control.{} WHERE schema_name = %s").format(
                    sql.Identifier(table)), [schema])
            conn.execute("DELETE FROM control.completed_runs WHERE tenant_id = %s", [tenant_id])
            conn.execute("DELETE FROM control.api_keys WHERE tenant_id = %s", [tenant_id])
            conn.execute("DELETE FROM control.tenants WHERE id = %s", [tenant_id])
    return len(rows)


def build_tenants(conn: psycopg.Connection[Any], count: int, label: str) -> Tenants:
    """``count`` migrated tenants, each with the fraud product, one analyst, one rule and an
    API key; made as `tocsin migrate` brings new schemas up to date."""
    from db.api_keys import create_api_key
    from db.migrations import migrate_all
    from db.products import create_product
    from db.rules import create_rule
    from db.tenancy import tenant_tx
    from db.users import create_user
    from domain.identity import Role
    from tests.support.many_tenants import add_unmigrated_tenants

    started = time.monotonic()
    schemas = add_unmigrated_tenants(conn, f"{PREFIX}{label}", count)
    migrate_all()
    slugs = [str(r[0]) for r in conn.execute(
        "SELECT slug FROM control.tenants WHERE schema_name = ANY(%s) ORDER BY slug", [schemas])]
    keys = []
    for n, slug in enumerate(slugs, 1):
        with tenant_tx(slug) as tx:
            create_product(tx, "fraud", "Fraud cases", ("case",))
            create_user(tx, ASSIGNEE, Role.MEMBER, "bench-password-1")
            create_rule(tx, RULE, by="bench")
        keys.append(create_api_key(slug, "bench")[1])
        if n % 200 == 0:
            say(f"    {n}/{count} tenants set up")
    say(f"  {count} tenants made, migrated and given a product, a rule and a key in "
        f"{time.monotonic() - started:.1f} s")
    return Tenants(slugs, schemas, keys)


def case(external_id: str) -> dict[str, Any]:
    return {"product": "fraud", "type": "created",
            "subject": {"kind": "case", "external_id": external_id, "assignees": [ASSIGNEE],
                        "fields": {"amount": 1000}}}


# --- the processes ------------------------------------------------------------------------


def start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    tocsin = str(Path(sys.executable).parent / "tocsin")
    handle = log.open("wb")
    return subprocess.Popen([tocsin, *command], env=env, stdout=handle, stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class Stack:
    """The Procfile's three lines, with the environment `tocsin up` gives them."""

    def __init__(self, name: str, **settings: str) -> None:
        from tocsin.processes import procfile_environment
        from tocsin.services import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = procfile_environment({**os.environ, **settings, "PORT": str(self.port)}, self.url)
        LOGS.mkdir(parents=True, exist_ok=True)
        web_log = LOGS / f"{name}-web.log"
        self.processes = [
            start(["web"], _named(env, "web"), web_log),
            # The Procfile's defaults, or what WORKER_PROCESSES / WORKER_THREADS say there.
            start(["worker", "--processes", env.get("WORKER_PROCESSES", "2"),
                   "--threads", env.get("WORKER_THREADS", "4")], _named(env, "worker"),
                  LOGS / f"{name}-worker.log"),
            start(["clock"], _named(env, "clock"), LOGS / f"{name}-clock.log"),
        ]
        try:
            wait_ready(self.processes[0], self.port, web_log)
        except SystemExit:
            self.close()
            raise

    def close(self) -> None:
        for p in self.processes:
            stop(p)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds (user + system) used so far by each line's live processes and their
        descendants (Dramatiq's worker processes run in a session of their own)."""
        table = _process_table()
        return {name: _tree_cpu(table, p.pid)
                for name, p in zip(("web", "worker", "clock"), self.processes, strict=True)}


def _named(env: dict[str, str], line: str) -> dict[str, str]:
    """The line's environment with its PostgreSQL sessions named after it (application_name),
    so that the backends' CPU can be told apart."""
    url = env["DATABASE_URL"]
    return {**env, "DATABASE_URL": f"{url}{'&' if '?' in url else '?'}application_name=evbench-{line}"}


def _process_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds so far) of every live process."""
    ticks = os.sysconf("SC_CLK_TCK")
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        # After the command's ")": state, ppid, ..., utime and stime (fields 14 and 15 of stat).
        table[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    return table


def backends_cpu(conn: psycopg.Connection[Any], table: dict[int, tuple[int, float]]
                 ) -> dict[tuple[int, str], float]:
    """CPU seconds so far of this database's PostgreSQL backends other than the observer's
    and this one (readable when PostgreSQL runs on this machine; empty otherwise)."""
    rows = conn.execute(
        "SELECT pid, application_name FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND application_name <> %s", [OBSERVER]).fetchall()
    return {(int(pid), str(name).removeprefix("evbench-")): table[int(pid)][1]
            for pid, name in rows if int(pid) in table}


def _tree_cpu(table: dict[int, tuple[int, float]], root: int) -> float:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += table.get(pid, (0, 0.0))[1]
        todo.extend(children.get(pid, []))
    return total


# --- the observer ---------------------------------------------------------------------------


class Observer:
    """A process of its own (no share of the senders' interpreter lock) that polls every
    tenant's inbox table every 25 ms and notes, on the wall clock, when each case's inbox row
    is first seen (by the case's external id). Each poll reads the rows above the highest id
    seen; every 20th poll also reads 200 ids below it, so a row committed late with a lower
    id is still seen (late, which only makes the figure worse)."""

    def __init__(self, database_url: str, schemas: Sequence[str]) -> None:
        self.seen: dict[str, float] = {}
        self._stop = multiprocessing.Event()
        self._parent, child = multiprocessing.Pipe()
        self._process = multiprocessing.Process(
            target=_observe, args=(database_url, list(schemas), self._stop, child), daemon=True)

    def start(self) -> None:
        self._process.start()

    def stop(self) -> None:
        self._stop.set()
        self.seen = self._parent.recv()
        self._process.join(timeout=30)


def _observe(database_url: str, schemas: list[str], stop: Any, out: Any) -> None:
    seen: dict[str, float] = {}
    top = dict.fromkeys(schemas, 0)
    polls = 0
    with psycopg.connect(database_url, autocommit=True, application_name=OBSERVER) as conn:
        while not stop.is_set():
            polls += 1
            back = 200 if polls % 20 == 0 else 0
            for start_at in range(0, len(schemas), 200):
                query = sql.SQL(" UNION ALL ").join(
                    sql.SQL("SELECT {s}, id, data->>'subject' FROM {schema}.notifications "
                            "WHERE id > {low}").format(
                        s=sql.Literal(s), schema=sql.Identifier(s), low=sql.Literal(top[s] - back))
                    for s in schemas[start_at:start_at + 200])
                rows = conn.execute(query).fetchall()
                now = time.time()
                for schema, row_id, subject in rows:
                    top[schema] = max(top[schema], int(row_id))
                    if subject is not None and subject not in seen:
                        seen[str(subject)] = now
            time.sleep(0.025)
    out.send(seen)


@dataclass
class Latencies:
    sent: dict[str, float] = field(default_factory=dict)
    errors: int = 0

    def measured(self, observer: Observer) -> list[float]:
        return sorted(observer.seen[k] - t for k, t in self.sent.items() if k in observer.seen)


def steady(rate: float, seconds: float, pick: Callable[[int], tuple[str, str]], latencies: Latencies,
           base_url: str, senders: int = 8) -> None:
    """Send ``rate`` events/s for ``seconds``, each at its scheduled instant (one request per
    event); ``pick(n)`` gives the n-th event's API key and case id."""
    total = int(rate * seconds)
    begin = time.monotonic() + 0.5
    lock = threading.Lock()

    def sender(first: int) -> None:
        with httpx.Client(base_url=base_url, timeout=30) as http:
            for n in range(first, total, senders):
                key, external_id = pick(n)
                wait = begin + n / rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                at = time.time()  # the wall clock: the observer runs in another process
                response = http.post("/api/v1/events", json=case(external_id),
                                     headers={"Authorization": f"Bearer {key}"})
                with lock:
                    if response.status_code == 201:
                        latencies.sent[external_id] = at
                    else:
                        latencies.errors += 1

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def percentile(values: Sequence[float], p: float) -> float:
    return values[min(len(values) - 1, int(len(values) * p))] * 1000 if values else float("nan")


def wait_for(observer: Observer, latencies: Latencies, limit: float) -> None:
    """Give the pipeline time to finish (the observer keeps watching), then stop it."""
    time.sleep(limit)
    observer.stop()


def report(label: str, latencies: Latencies, observer: Observer, goal_ms: float) -> bool:
    values = latencies.measured(observer)
    missing = len(latencies.sent) - len(values)
    p50, p99 = percentile(values, 0.50), percentile(values, 0.99)
    ok = missing == 0 and latencies.errors == 0 and p99 < goal_ms
    say(f"  {label}: {len(values)} events, p50 {p50:.0f} ms, p99 {p99:.0f} ms, max "
        f"{(values[-1] * 1000) if values else float('nan'):.0f} ms; goal p99 < {goal_ms:.0f} ms: "
        f"{'met' if ok else 'MISSED'}"
        + (f" ({missing} never seen)" if missing else "")
        + (f" ({latencies.errors} refused)" if latencies.errors else ""))
    return ok


# --- sections --------------------------------------------------------------------------------


def _round_robin(keys: Sequence[str], run: str, n: int) -> tuple[str, str]:
    return keys[n % len(keys)], f"{run}-{n}"


# Per event of a run, PostgreSQL's timestamps along the pipeline: recorded_at is the API
# transaction's start, the ledger's claimed_at the evaluating transaction's, evaluated_at
# the end of its work, the notification's created_at the preparing transaction's start.
_STAGES = """SELECT s.external_id, extract(epoch FROM e.recorded_at), extract(epoch FROM l.claimed_at),
       extract(epoch FROM e.evaluated_at), extract(epoch FROM n.created_at)
FROM {schema}.events e JOIN {schema}.subjects s ON s.id = e.subject_id
JOIN {schema}.notification_ledger l ON l.event_id = e.id
JOIN {schema}.notifications n ON n.ledger_id = l.id
WHERE starts_with(s.external_id, {run})"""

STAGE_NAMES = ("request sent -> API transaction begins",
               "API transaction begins -> evaluating transaction begins",
               "evaluating transaction: begins -> events marked evaluated",
               "evaluated -> preparing transaction begins",
               "preparing transaction begins -> observer sees the row")


def stages(conn: psycopg.Connection[Any], schemas: Sequence[str], run: str, latencies: Latencies,
           observer: Observer) -> None:
    """Where the time went: p50/p99 of each step between two of an event's timestamps."""
    query = sql.SQL(" UNION ALL ").join(
        sql.SQL(_STAGES).format(schema=sql.Identifier(s), run=sql.Literal(f"{run}-")) for s in schemas)
    steps: list[list[float]] = [[] for _ in STAGE_NAMES]
    for external_id, recorded, claimed, evaluated, created in conn.execute(query).fetchall():
        sent, seen = latencies.sent.get(external_id), observer.seen.get(external_id)
        if sent is None or seen is None:
            continue
        marks = [sent, float(recorded), float(claimed), float(evaluated), float(created), seen]
        for i in range(len(STAGE_NAMES)):
            steps[i].append(marks[i + 1] - marks[i])
    for name, values in zip(STAGE_NAMES, steps, strict=True):
        values.sort()
        say(f"    {name}: p50 {percentile(values, 0.5):.0f} ms, p99 {percentile(values, 0.99):.0f} ms")


def latency(conn: psycopg.Connection[Any], database_url: str, seconds: float,
            runs: Sequence[str] = ("on", "off")) -> bool:
    say("latency: 100 events/s over 50 tenants, commit to inbox row")
    tenants = build_tenants(conn, 50, "l")
    ok = True
    poll = 5
    for wakeup, goal in (("1", 500.0), ("0", poll * 1000 + 500.0)):
        if {"1": "on", "0": "off"}[wakeup] not in runs:
            continue
        stack = Stack(f"latency-wakeup{wakeup}", EVENTS_WAKEUP=wakeup, EVENTS_POLL_SECONDS=str(poll))
        observer = Observer(database_url, tenants.schemas)
        observer.start()
        latencies = Latencies()
        run = f"w{wakeup}-{random.randrange(1 << 30):x}"
        try:
            before = stack.cpu_seconds()
            pg_before = backends_cpu(conn, _process_table())
            load_before = os.getloadavg()[0]
            started = time.monotonic()
            steady(100, seconds, partial(_round_robin, tenants.keys, run), latencies, stack.url)
            load_after = os.getloadavg()[0]
            wait_for(observer, latencies, 15)
            cpu = {k: v - before[k] for k, v in stack.cpu_seconds().items()}
            for (pid, line), v in backends_cpu(conn, _process_table()).items():
                key = f"postgres for {line}"
                cpu[key] = cpu.get(key, 0.0) + v - pg_before.get((pid, line), 0.0)
            elapsed = time.monotonic() - started
        finally:
            stack.close()
        label = "with the after-commit wake-up" if wakeup == "1" else f"polling only (every {poll} s)"
        ok = report(label, latencies, observer, goal) and ok
        sent = max(1, len(latencies.sent))
        say(f"    load average (1 min) {load_before:.1f} before sending, {load_after:.1f} at its end; "
            "CPU ms per event: " + ", ".join(f"{k} {v * 1000 / sent:.1f}" for k, v in cpu.items())
            + f" (over {elapsed:.0f} s, idle tail included)")
        stages(conn, tenants.schemas, run, latencies, observer)
    return ok


def fairness(conn: psycopg.Connection[Any], database_url: str, seconds: float) -> bool:
    say("fairness: 1,000 tenants, one with a backlog of 100,000 events; 20 events/s to the others")
    tenants = build_tenants(conn, 1000, "f")
    backlog_schema = tenants.schemas[0]
    started = time.monotonic()
    with conn.transaction():
        conn.execute(sql.SQL(
            "INSERT INTO {s}.subjects (product, kind, external_id) VALUES ('fraud', 'case', 'backlog')"
        ).format(s=sql.Identifier(backlog_schema)))
        conn.execute(sql.SQL(
            "INSERT INTO {s}.events (product, subject_id, event_type, occurred_at, source) "
            "SELECT 'fraud', (SELECT id FROM {s}.subjects WHERE external_id = 'backlog'), 'created', "
            "now(), 'host' "
            "FROM generate_series(1, 100000)").format(s=sql.Identifier(backlog_schema)))
    say(f"  backlog of 100,000 events written in {time.monotonic() - started:.1f} s")
    stack = Stack("fairness")
    observer = Observer(database_url, tenants.schemas[1:])
    observer.start()
    latencies = Latencies()
    others = len(tenants.slugs) - 1
    try:
        steady(20, seconds, lambda n: (tenants.keys[1 + random.randrange(others)], f"f-{n}"),
               latencies, stack.url, senders=4)
        wait_for(observer, latencies, 15)
        left = conn.execute(sql.SQL("SELECT count(*) FROM {s}.events WHERE status <> 'evaluated'").format(
            s=sql.Identifier(backlog_schema))).fetchone()
    finally:
        stack.close()
    ok = report("the other tenants' events", latencies, observer, 2000.0)
    assert left is not None
    say(f"  meanwhile the backlog tenant had {100_000 - int(left[0]):,} of its 100,000 events evaluated")
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.events", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="latency,fairness,intake,rules")
    parser.add_argument("--seconds", type=float, default=30.0, help="of steady sending per run")
    parser.add_argument("--wakeup", default="on,off",
                        help="latency runs: with the wake-up (on), polling only (off), or both")
    args = parser.parse_args(argv)
    wanted = {s.strip() for s in args.only.split(",") if s.strip()}
    os.environ.setdefault("SESSION_SECRET", secrets.token_urlsafe(48))
    ok = True
    with bench_services(say):
        from db.migrations import migrate_all
        from tocsin import runtime
        from tocsin.config import load_settings

        settings = runtime.start(load_settings())
        migrate_all()
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            drop_bench_tenants(conn)
            try:
                if "latency" in wanted:
                    ok = latency(conn, settings.database_url, args.seconds,
                                 [w.strip() for w in args.wakeup.split(",")]) and ok
                    drop_bench_tenants(conn)
                if "fairness" in wanted:
                    ok = fairness(conn, settings.database_url, args.seconds) and ok
            finally:
                drop_bench_tenants(conn)
        if "intake" in wanted:
            from bench.events_intake import measure_intake

            say("intake: the batch API against a raw INSERT")
            figures = measure_intake(say, 10_000)
            ok = bool(getattr(figures, "ratio", 0) >= 0.3) and ok
        if "rules" in wanted:
            from bench import rules_loading

            say("rules: targeted loading against loading every fact")
            ok = rules_loading.main([]) == 0 and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
