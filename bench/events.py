"""Events in, end to end: how long from an event's commit to the committed inbox row, and
whether one tenant's backlog makes the others wait.

Sections (all by default; pick with --only):
- latency: a steady 100 events/s spread over 50 tenants, to the Procfile's processes
  (`tocsin web`, `tocsin worker`, `tocsin clock`), each tenant first given a history of
  past cases (a tenant's tables are not empty in production, and a fresh table's first
  rows set off autovacuum's analyses, which a real deployment has long behind it). Runs
  (--runs): `host`, events recorded by host applications in their own transactions
  (tocsin.shell.outbox.record_event, one transaction per event), each event's clock starting
  when its host's commit returns (the goal's "from the host's commit"; goal p99 < 500 ms);
  `host-polling`, the same with the wake-up off, where only the polling fallback finds the
  events (goal p99 <= EVENTS_POLL_SECONDS + 500 ms); `api`, one HTTP request per event
  through the events API, the clock starting just before the request is sent (so the API's
  own transaction is included: an upper bound; same goal as `host`). Each run sends for
  --warmup seconds first, not counted (connections, prepared statements and plans of 50
  tenants being made), then for --seconds. An observer, a process of its own polling the
  tenants' inbox tables every 25 ms, stops each event's clock when it first sees its row.
- fairness: 1,000 tenants, one of them with a backlog of 100,000 events, while 20 events/s
  go to the others at random: the others' p99 (goal < 2 s).
- intake: events/s through the batch API against a raw INSERT of the same rows
  (bench/events_intake.py; goal >= 0.3 of the raw ceiling).
- rules: targeted loading against loading every fact (bench/rules_loading.py; goal >= 5x).

    python -m bench.events [--only latency,fairness,intake,rules] [--seconds 30]
                           [--runs host,host-polling,api] [--warmup 20] [--history 1000]

Without DATABASE_URL / REDIS_URL it starts embedded services under .tocsin/bench.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import random
import resource
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
    from db.events.api_keys import create_api_key
    from db.events.products import create_product
    from db.people.users import create_user
    from db.platform.migrations import migrate_all
    from db.platform.tenancy import tenant_tx
    from db.rules.definitions import create_rule
    from domain.people.identity import Role
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
        from tocsin.shell.processes import procfile_environment
        from tocsin.shell.services import free_port

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
    id is still seen (late, which only makes the figure worse). The observer is ready (it
    has read where each inbox ends) when start() returns."""

    def __init__(self, database_url: str, schemas: Sequence[str]) -> None:
        self.seen: dict[str, float] = {}
        self._stop, self._ready = multiprocessing.Event(), multiprocessing.Event()
        self._parent, child = multiprocessing.Pipe()
        self._process = multiprocessing.Process(
            target=_observe, args=(database_url, list(schemas), self._stop, self._ready, child),
            daemon=True)

    def start(self) -> None:
        self._process.start()
        if not self._ready.wait(300):
            raise SystemExit("the observer did not get ready within 5 minutes")

    def stop(self) -> None:
        self._stop.set()
        self.seen, poll = self._parent.recv()
        self._process.join(timeout=30)
        say(f"    (the observer's polls took {poll * 1000:.1f} ms each on average, every 25 ms)")


def _observe(database_url: str, schemas: list[str], stop: Any, ready: Any, out: Any) -> None:
    seen: dict[str, float] = {}
    polls = 0
    chunks = [schemas[i:i + 100] for i in range(0, len(schemas), 100)]
    with psycopg.connect(database_url, autocommit=True, application_name=OBSERVER) as conn:
        # One prepared statement per 100 schemas, each planned once (planning a fresh
        # statement for every schema, 40 times a second, was a fifth of a CPU), and all of a
        # poll in one round trip.
        conn.execute("SET plan_cache_mode = force_generic_plan")
        reads = [sql.SQL(" UNION ALL ").join(
            sql.SQL("(SELECT {n}, id, data->>'subject' FROM {s}.notifications WHERE id > %s "
                    "ORDER BY id LIMIT 5000)").format(n=sql.Literal(s), s=sql.Identifier(s))
            for s in chunk).as_string(conn) for chunk in chunks]
        # From the rows there are now on: the tenants' history is not looked at again.
        top = dict.fromkeys(schemas, 0)
        for chunk in chunks:
            top.update((str(n), int(str(m))) for n, m in conn.execute(sql.SQL(" UNION ALL ").join(
                sql.SQL("SELECT {n}, coalesce(max(id), 0) FROM {s}.notifications").format(
                    n=sql.Literal(s), s=sql.Identifier(s)) for s in chunk)).fetchall())
        polling = 0.0
        while not stop.is_set():
            polls += 1
            began = time.perf_counter()
            back = 200 if polls % 20 == 0 else 0
            with conn.pipeline():
                cursors = [conn.execute(q, [top[s] - back for s in chunk], prepare=True)
                           for q, chunk in zip(reads, chunks, strict=True)]
            now = time.time()
            for cur in cursors:
                for schema, row_id, subject in cur.fetchall():
                    top[schema] = max(top[schema], int(row_id))
                    if subject is not None and subject not in seen:
                        seen[str(subject)] = now
            ready.set()  # after the first poll: every statement prepared
            polling += time.perf_counter() - began
            time.sleep(0.025)
    out.send((seen, polling / max(1, polls)))


@dataclass
class Latencies:
    sent: dict[str, float] = field(default_factory=dict)
    errors: int = 0

    def measured(self, observer: Observer) -> list[float]:
        return sorted(observer.seen[k] - t for k, t in self.sent.items() if k in observer.seen)


class ApiIntake:
    """One HTTP request per event, through the events API; timed from just before it is sent."""

    def __init__(self, base_url: str, keys: Sequence[str]) -> None:
        self._base_url, self._keys = base_url, list(keys)
        self._clients: list[httpx.Client] = []

    def close(self) -> None:
        for client in self._clients:
            client.close()

    def sender(self) -> Callable[[int, str], float | None]:
        http = httpx.Client(base_url=self._base_url, timeout=30)
        self._clients.append(http)

        def send(tenant: int, external_id: str) -> float | None:
            at = time.time()  # the wall clock: the observer runs in another process
            response = http.post("/api/v1/events", json=case(external_id),
                                 headers={"Authorization": f"Bearer {self._keys[tenant]}"})
            return at if response.status_code == 201 else None

        return send


class HostIntake:
    """A host application on the same PostgreSQL: its own write and record_event in one
    transaction per event; timed from the moment its commit returns."""

    def __init__(self, database_url: str, slugs: Sequence[str]) -> None:
        self._database_url, self._slugs = database_url, list(slugs)
        self._connections: list[psycopg.Connection[Any]] = []  # kept open: their backends' CPU

    def close(self) -> None:
        for conn in self._connections:
            conn.close()

    def sender(self) -> Callable[[int, str], float | None]:
        from tocsin.shell.outbox import record_event

        conn = psycopg.connect(self._database_url, application_name="evbench-host")
        self._connections.append(conn)

        def send(tenant: int, external_id: str) -> float | None:
            try:
                record_event(conn, self._slugs[tenant], case(external_id))
                conn.commit()
            except psycopg.Error:
                conn.rollback()
                return None
            return time.time()

        return send


Intake = ApiIntake | HostIntake


def steady(rate: float, seconds: float, pick: Callable[[int], tuple[int, str]], latencies: Latencies,
           intake: Intake, senders: int = 8) -> None:
    """Send ``rate`` events/s for ``seconds``, each at its scheduled instant (one request or
    one host transaction per event); ``pick(n)`` gives the n-th event's tenant and case id."""
    total = int(rate * seconds)
    begin = time.monotonic() + 0.5
    lock = threading.Lock()

    def sender(first: int) -> None:
        send = intake.sender()
        for n in range(first, total, senders):
            tenant, external_id = pick(n)
            wait = begin + n / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            at = send(tenant, external_id)
            with lock:
                if at is not None:
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


def _round_robin(tenants: int, run: str, n: int) -> tuple[int, str]:
    return n % tenants, f"{run}-{n}"


# Per event of a run, PostgreSQL's timestamps along the pipeline: recorded_at is the API
# transaction's start, the ledger's claimed_at the evaluating transaction's, evaluated_at
# the end of its work, the notification's created_at the preparing transaction's start.
_STAGES = """SELECT s.external_id, extract(epoch FROM e.recorded_at), extract(epoch FROM l.claimed_at),
       extract(epoch FROM e.evaluated_at), extract(epoch FROM n.created_at)
FROM {schema}.events e JOIN {schema}.subjects s ON s.id = e.subject_id
JOIN {schema}.notification_ledger l ON l.event_id = e.id
JOIN {schema}.notifications n ON n.ledger_id = l.id
WHERE starts_with(s.external_id, {run})"""

API_STAGES = ("request sent -> API transaction begins",
              "API transaction begins -> evaluating transaction begins",
              "evaluating transaction: begins -> events marked evaluated",
              "evaluated -> preparing transaction begins",
              "preparing transaction begins -> observer sees the row")
HOST_STAGES = ("host's commit -> evaluating transaction begins",
               "evaluating transaction: begins -> events marked evaluated",
               "evaluated -> preparing transaction begins",
               "preparing transaction begins -> observer sees the row")


def stages(conn: psycopg.Connection[Any], schemas: Sequence[str], run: str, latencies: Latencies,
           observer: Observer, from_commit: bool) -> None:
    """Where the time went: p50/p99 of each step between two of an event's timestamps."""
    rows: list[tuple[Any, ...]] = []
    for first in range(0, len(schemas), 100):  # a statement's locks stay within the server's bound
        rows += conn.execute(sql.SQL(" UNION ALL ").join(
            sql.SQL(_STAGES).format(schema=sql.Identifier(s), run=sql.Literal(f"{run}-"))
            for s in schemas[first:first + 100])).fetchall()
    names = HOST_STAGES if from_commit else API_STAGES
    steps: list[list[float]] = [[] for _ in names]
    slow: list[tuple[str, list[float]]] = []
    for external_id, recorded, claimed, evaluated, created in rows:
        sent, seen = latencies.sent.get(external_id), observer.seen.get(external_id)
        if sent is None or seen is None:
            continue
        marks = [sent, *([] if from_commit else [float(recorded)]), float(claimed), float(evaluated),
                 float(created), seen]
        for i in range(len(names)):
            steps[i].append(marks[i + 1] - marks[i])
        slow.append((str(external_id), marks))
    for name, values in zip(names, steps, strict=True):
        values.sort()
        say(f"    {name}: p50 {percentile(values, 0.5):.0f} ms, p99 {percentile(values, 0.99):.0f} ms")
    slowest = sorted(slow, key=lambda item: item[1][-1] - item[1][0], reverse=True)[:5]
    for external_id, marks in slowest:
        say(f"    slowest: {external_id}: " + ", ".join(
            f"{(b - a) * 1000:.0f}" for a, b in itertools.pairwise(marks)) + " ms")


def give_history(conn: psycopg.Connection[Any], tenants: Tenants, average: int) -> None:
    """Each tenant gets between half and one and a half times ``average`` past cases, through
    the product's own path (recorded, claimed, evaluated and prepared in this process:
    subjects, events, ledger claims, traces and inbox rows), then its tables vacuumed and
    analysed, as a tenant's are that has been in use for a while."""
    from db.events.outbox import record_events
    from db.events.relay import claim_events
    from db.notices.rule_notices import prepare_rule_claims
    from db.platform.effects import AnnounceInbox, PrepareClaims, WakeRelay
    from db.platform.tenancy import tenant_tx
    from db.rules.evaluations import evaluate_claimed
    from domain.events.intake import parse_event

    if average <= 0:
        return
    started, total = time.monotonic(), 0
    rng = random.Random(7)
    for n, slug in enumerate(tenants.slugs, 1):
        count = rng.randint(average // 2, average * 3 // 2)
        for first in range(0, count, 500):
            events = [parse_event(case(f"past-{slug}-{i}"))[0] for i in range(first, min(count, first + 500))]
            with tenant_tx(slug) as tx:
                record_events(tx, [e for e in events if e is not None], "host")
                tx.take(WakeRelay)  # no wake-up: evaluated right here
            with tenant_tx(slug) as tx:
                batch = claim_events(tx, limit=500, lease_seconds=600, max_attempts=5)
            with tenant_tx(slug) as tx:
                evaluate_claimed(tx, batch.event_ids)
                taken = tx.take(PrepareClaims)
                ledger_ids = sorted(i for _, i in taken.claims) if taken else []
            with tenant_tx(slug) as tx:
                prepare_rule_claims(tx, ledger_ids)
                tx.take(AnnounceInbox)
            total += len(events)
        if n % 10 == 0:
            say(f"    history: {n}/{len(tenants.slugs)} tenants, {total:,} past cases "
                f"({time.monotonic() - started:.0f} s)")
    tables = conn.execute("SELECT schemaname, relname FROM pg_stat_user_tables WHERE schemaname = ANY(%s)",
                          [tenants.schemas]).fetchall()
    for schema, table in tables:
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}.{}").format(sql.Identifier(str(schema)),
                                                              sql.Identifier(str(table))))
    say(f"  history: {total:,} past cases over {len(tenants.slugs)} tenants, then {len(tables)} tables "
        f"vacuumed and analysed, in {time.monotonic() - started:.0f} s")


RUNS = {  # name: (EVENTS_WAKEUP, how events come in, whose clock)
    "host": ("1", "host", "from the host's commit, with the wake-up"),
    "host-polling": ("0", "host", "from the host's commit, polling only"),
    "api": ("1", "api", "from the HTTP request, with the wake-up"),
}


def latency(conn: psycopg.Connection[Any], database_url: str, seconds: float,
            runs: Sequence[str] = ("host", "host-polling", "api"), *, warmup: float = 20.0,
            history: int = 1000) -> bool:
    say("latency: 100 events/s over 50 tenants, commit to inbox row")
    tenants = build_tenants(conn, 50, "l")
    give_history(conn, tenants, history)
    ok = True
    poll = 5
    for name in runs:
        wakeup, source, label = RUNS[name]
        goal = 500.0 if wakeup == "1" else poll * 1000 + 500.0
        stack = Stack(f"latency-{name}", EVENTS_WAKEUP=wakeup, EVENTS_POLL_SECONDS=str(poll))
        observer = Observer(database_url, tenants.schemas)
        observer.start()
        intake: Intake = (HostIntake(database_url, tenants.slugs) if source == "host"
                          else ApiIntake(stack.url, tenants.keys))
        latencies, warm = Latencies(), Latencies()
        run = f"{name}-{random.randrange(1 << 30):x}"
        try:
            if warmup > 0:
                steady(100, warmup, partial(_round_robin, len(tenants.slugs), f"warm{run}"), warm, intake)
            before = stack.cpu_seconds()
            pg_before = backends_cpu(conn, _process_table())
            own_before = _own_cpu()
            load_before = os.getloadavg()[0]
            started = time.monotonic()
            steady(100, seconds, partial(_round_robin, len(tenants.slugs), run), latencies, intake)
            load_after = os.getloadavg()[0]
            own = _own_cpu() - own_before
            wait_for(observer, latencies, 15)
            cpu = {k: v - before[k] for k, v in stack.cpu_seconds().items()}
            cpu["senders"] = own
            for (pid, line), v in backends_cpu(conn, _process_table()).items():
                key = f"postgres for {line}"
                cpu[key] = cpu.get(key, 0.0) + v - pg_before.get((pid, line), 0.0)
            elapsed = time.monotonic() - started
        finally:
            intake.close()
            stack.close()
        if warmup > 0:
            values = warm.measured(observer)
            say(f"  {name}: warm-up of {warmup:.0f} s, not counted: {len(values)} events, "
                f"p50 {percentile(values, 0.5):.0f} ms, p99 {percentile(values, 0.99):.0f} ms")
        ok = report(f"{name} ({label})", latencies, observer, goal) and ok
        sent = max(1, len(latencies.sent))
        say(f"    load average (1 min) {load_before:.1f} before sending, {load_after:.1f} at its end; "
            "CPU ms per event: " + ", ".join(f"{k} {v * 1000 / sent:.1f}" for k, v in cpu.items()
                                             if v * 1000 / sent >= 0.05)
            + f" (over {elapsed:.0f} s, idle tail included)")
        stages(conn, tenants.schemas, run, latencies, observer, from_commit=source == "host")
    return ok


def _own_cpu() -> float:
    """CPU seconds of this process (the senders' threads; the observer is a process apart)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


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
    intake = ApiIntake(stack.url, tenants.keys)
    try:
        steady(20, seconds, lambda n: (1 + random.randrange(others), f"f-{n}"),
               latencies, intake, senders=4)
        wait_for(observer, latencies, 15)
        left = conn.execute(sql.SQL("SELECT count(*) FROM {s}.events WHERE status <> 'evaluated'").format(
            s=sql.Identifier(backlog_schema))).fetchone()
    finally:
        intake.close()
        stack.close()
    ok = report("the other tenants' events", latencies, observer, 2000.0)
    stages(conn, tenants.schemas[1:], "f", latencies, observer, from_commit=False)
    assert left is not None
    say(f"  meanwhile the backlog tenant had {100_000 - int(left[0]):,} of its 100,000 events evaluated")
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.events", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="latency,fairness,intake,rules")
    parser.add_argument("--seconds", type=float, default=30.0, help="of steady sending per run")
    parser.add_argument("--runs", default="host,host-polling,api",
                        help="latency runs: " + ", ".join(RUNS))
    parser.add_argument("--warmup", type=float, default=20.0,
                        help="seconds of sending before each latency run, not counted")
    parser.add_argument("--history", type=int, default=1000,
                        help="past cases per latency tenant on average (0: none)")
    args = parser.parse_args(argv)
    wanted = {s.strip() for s in args.only.split(",") if s.strip()}
    os.environ.setdefault("SESSION_SECRET", secrets.token_urlsafe(48))
    ok = True
    with bench_services(say):
        from db.platform.migrations import migrate_all
        from tocsin import boot
        from tocsin.core.settings import load_settings

        settings = boot.start(load_settings())
        migrate_all()
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            drop_bench_tenants(conn)
            try:
                if "latency" in wanted:
                    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
                    unknown = [r for r in runs if r not in RUNS]
                    if unknown:
                        parser.error(f"unknown run(s) {', '.join(unknown)}: pick from {', '.join(RUNS)}")
                    ok = latency(conn, settings.database_url, args.seconds, runs,
                                 warmup=args.warmup, history=args.history) and ok
                    drop_bench_tenants(conn)
                if "fairness" in wanted:
                    ok = fairness(conn, settings.database_url, args.seconds) and ok
            finally:
                drop_bench_tenants(conn)
        if "intake" in wanted:
            from bench.events_intake import measure_intake

            say("intake: the batch API against a raw INSERT")
            figures = measure_intake(say, 20_000)
            ok = bool(getattr(figures, "ratio", 0) >= 0.3) and ok
        if "rules" in wanted:
            from bench import rules_loading

            say("rules: targeted loading against loading every fact")
            ok = rules_loading.main([]) == 0 and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
