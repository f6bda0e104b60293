"""Email delivery throughput through real workers: figures, not a timed test.

    python -m bench.deliver [--deliveries 20000] [--tenants 4] [--processes 1,2] [--threads 4]
                            [--send-rate 50] [--rate-deliveries 2000] [--skip-throughput] [--keep]
                            [--broker-url amqp://guest:guest@127.0.0.1:5672/%2F]

Builds ``--deliveries`` due email deliveries, committed in PostgreSQL set-based over
``--tenants`` bench tenants (slugs bench-deliver-1...): each the pending email of an inbox
notification of a claimed licence notice (ledger row, client, member recipient), exactly
what a scan and ``prepare`` leave behind. They are put in Redis as a committed scan hands
them over (tocsin/messaging/dispatch.py: one ``deliver_email`` message per 20 deliveries of a
tenant), then the worker is started as the Procfile does (``tocsin worker --processes P
--threads T``) and sends them all to a local SES v2 endpoint (bench/ses_endpoint.py, an
asyncio server fast enough not to be the bottleneck; moto would be). For each ``P`` in
``--processes`` it measures, in the same run:

  deliveries  real workers: deliveries / (last accepted_at - first claim), both read
              from PostgreSQL, plus p50/p99 claim-to-accepted per delivery (the attempt's
              started_at, written by the claim, to the delivery's accepted_at);
  no-op       the Dramatiq ceiling: as many messages for an actor that does nothing
              (bench/noop_actor.py) on the same broker, P processes x T threads, timed by
              watching Redis acknowledge them;
  client      the provider ceiling: a bare loop of the product's SES client (the signed
              SendEmail request of tocsin/providers/ses_api.py), P processes x T threads,
              against the same endpoint (the endpoint's own CPU share during it shows it is
              not what limits the loop);

and prints deliveries/s, each ceiling, the ratio to the lower ceiling (goal >= 0.5) and
the latencies.

With ``--broker-url`` (default: BROKER_URL when set) each throughput run is made twice, on
the Redis broker and on that RabbitMQ (in a vhost of its own, made for the bench and
deleted after it; publisher confirms on, as the product runs it), and the report puts the
deliveries/s of the two brokers side by side. RabbitMQ counts only the messages ready in a
queue, not those a worker holds, so its no-op ceiling is timed to the last message fetched:
at most P x T x 2 prefetched no-op messages were still running then.

Throughput runs set SES_MAX_SEND_RATE very high (the settings default is SES's 14/s): the
limiter's Redis round trip is still paid for every send. Then, unless
``--send-rate 0``, a run of ``--rate-deliveries`` with SES_MAX_SEND_RATE=``--send-rate``
and the Procfile's 2 processes: the rate the endpoint saw must be within 5% of it.

Every run is counted from the outside: the endpoint's requests against the accepted rows;
every delivery must be accepted exactly once, with one attempt and one request. Any
difference fails the bench (exit 1). The load average is printed with every phase: the
figures are only as quiet as the machine.

DATABASE_URL / REDIS_URL name the services; when either is unset the embedded ones are
started under .tocsin/bench. The rate-limit run uses the Redis broker. The bench tenants
are suspended (a clock on the same database never scans them) and dropped at the end
unless --keep.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

Connection = psycopg.Connection[tuple[Any, ...]]

SLUG_PREFIX = "bench-deliver-"
SLUG_PATTERN = "^bench-deliver-[0-9]+$"  # only what this bench creates
USERS_PER_TENANT = 250  # recipients; each receives deliveries / tenants / 250 emails
UNLIMITED_RATE = 1_000_000.0  # emails per second: far above anything measured here
GOAL_RATIO = 0.5  # deliveries/s over the lower ceiling
RATE_TOLERANCE = 0.05  # the limited rate must be within 5% of the limit
NOOP_QUEUE = "bench_noop"
START_LIMIT = 60.0  # seconds a worker or the endpoint may take to start
POLL = 0.02  # seconds between two looks at Redis or PostgreSQL while a phase runs
UNCERTAIN_POLL = 0.05  # seconds between two counts of the provider-called deliveries without an outcome
LOGS = Path(".tocsin/bench").resolve()


def say(text: str = "") -> None:
    print(text, flush=True)


def load() -> str:
    """The 1, 5 and 15 minute load averages (2 CPUs: above 2, work was waiting for a CPU)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# -- the brokers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Broker:
    """One broker the throughput runs are made on: Redis (url None) or a RabbitMQ vhost."""

    name: str
    url: str | None  # BROKER_URL for this broker; None is the Redis broker on REDIS_URL

    def install(self) -> None:
        """Make it this process's broker (the sends) and the workers' (their environment)."""
        from tocsin import boot
        from tocsin.core import runtime

        if self.url is None:
            os.environ.pop("BROKER_URL", None)
        else:
            os.environ["BROKER_URL"] = self.url
        boot.start_messaging(boot.start(replace(runtime.settings(), broker_url=self.url)))


REDIS = Broker("Redis", None)


# -- the endpoint --------------------------------------------------------------------------


class Endpoint:
    """bench/ses_endpoint.py in its own process, read through its own API."""

    def __init__(self, port: int):
        self.url = f"http://127.0.0.1:{port}"
        self._log = (LOGS / "ses-endpoint.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.ses_endpoint", "--port", str(port)],
            stdout=self._log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_LIMIT
        while True:
            try:
                self.received()
                return
            except OSError as error:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the bench SES endpoint did not start ({error}); "
                                     f"see {self._log.name}") from None
                time.sleep(0.1)

    def received(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/bench/received", timeout=30) as r:
            return dict(json.load(r))

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.url}/bench/reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=30):
            pass

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.process.pid)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (Linux /proc), 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def service_pids() -> list[int]:
    """The embedded PostgreSQL's postmaster and this process's Redis, when they run here."""
    pids = []
    postmaster = LOGS / "pg" / "postmaster.pid"
    if postmaster.exists():  # the bench started PostgreSQL (main: DATABASE_URL was unset)
        pids.append(int(postmaster.read_text().split()[0]))
    for task in Path("/proc/self/task").glob("*"):
        for child in (task / "children").read_text().split():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{child}/comm").read_text().strip() == "redis-server":
                    pids.append(int(child))
    return pids


def services_cpu_seconds(pids: Sequence[int]) -> float:
    """CPU seconds of the embedded services (PostgreSQL with its live backends, Redis)."""
    return sum(tree_cpu_seconds(pid) for pid in pids)


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its descendants still running (the worker's children)."""
    total = process_cpu_seconds(pid)
    for task in Path(f"/proc/{pid}/task").glob("*"):
        children = task / "children"
        if children.exists():
            for child in children.read_text().split():
                total += tree_cpu_seconds(int(child))
    return total


# -- data --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchTenant:
    slug: str
    schema: str


# The tables a delivery run reads and writes: vacuumed and analysed after the bulk build, as
# pgbench vacuums before its runs. Otherwise autovacuum takes on the build's rows in the middle
# of the run (its CPU counted as PostgreSQL's, its work competing with the workers'), and the
# statements of the first seconds are planned without statistics.
RUN_TABLES = ("notification_deliveries", "delivery_attempts", "notification_ledger", "notifications",
              "evidence_pending", "users", "clients")


def vacuum(conn: Connection, tenants: Sequence[BenchTenant]) -> None:
    for t in tenants:
        for table in RUN_TABLES:
            conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(t.schema, table)))


def drop_bench_tenants(conn: Connection) -> int:
    from db.platform.migrations import drop_schema

    rows = conn.execute("SELECT id, schema_name FROM control.tenants WHERE slug ~ %s",
                        [SLUG_PATTERN]).fetchall()
    for tenant_id, schema in rows:
        with conn.transaction():
            drop_schema(conn, str(schema))
            conn.execute("DELETE FROM control.schema_migrations WHERE schema_name = %s", [schema])
            conn.execute("DELETE FROM control.tenants WHERE id = %s", [tenant_id])
    return len(rows)


def build(conn: Connection, deliveries: int, tenants: int) -> list[BenchTenant]:
    """Per tenant, set-based: members, clients whose licence ends in 30 days, the claimed
    d30 ledger rows, their inbox notifications and one pending email delivery each."""
    from db.platform.tenancy import create_tenant

    built = []
    base, extra = divmod(deliveries, tenants)
    for n in range(1, tenants + 1):
        tenant = create_tenant(f"{SLUG_PREFIX}{n}", f"Bench delivery tenant {n}", "Europe/London")
        conn.execute("UPDATE control.tenants SET status = 'suspended' WHERE id = %s", [tenant.id])
        size = base + (1 if n <= extra else 0)
        with conn.transaction():
            conn.execute("SELECT set_config('search_path', %s, true)", [f"{tenant.schema}, public"])
            conn.execute(
                "INSERT INTO users (email, display_name, role) "
                "SELECT 'member' || g || '@bench-deliver.example', 'Bench member ' || g, 'member' "
                "FROM generate_series(1, %s) AS g",
                [USERS_PER_TENANT],
            )
            conn.execute(
                "INSERT INTO clients (name, access_expires_on) "
                "SELECT 'Client ' || g, current_date + 30 FROM generate_series(1, %s) AS g",
                [size],
            )
            conn.execute(
                "INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on, "
                "status, local_date, prepared_at) "
                "SELECT 'licence', 'client', id, 'd30', access_expires_on, 'claimed', current_date, "
                "now() FROM clients ORDER BY id"
            )
            conn.execute(
                """
                INSERT INTO notifications (recipient_user_id, ledger_id, category, title, body, data,
                                           idempotency_key)
                SELECT u.first_id + (l.id %% %(users)s), l.id, 'license_expiring',
                       'Access for Client ' || l.subject_id || ' ends in 30 days',
                       'Access for Client ' || l.subject_id || ' ends on '
                           || to_char(l.due_on, 'YYYY-MM-DD') || '. Renew to keep access.',
                       jsonb_build_object('href', '/clients/' || l.subject_id),
                       'bench-deliver:' || l.id
                FROM notification_ledger l, (SELECT min(id) AS first_id FROM users) u
                ORDER BY l.id
                """,
                {"users": USERS_PER_TENANT},
            )
            conn.execute(
                "INSERT INTO notification_deliveries (notification_id, channel, status, send_after, "
                "enqueued_at) SELECT id, 'email', 'pending', now(), now() FROM notifications ORDER BY id"
            )
        for table in ("users", "clients", "notification_ledger", "notifications",
                      "notification_deliveries", "delivery_attempts"):
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(tenant.schema, table)))
        built.append(BenchTenant(tenant.slug, tenant.schema))
    return built


def delivery_ids(conn: Connection, tenant: BenchTenant) -> list[int]:
    rows = conn.execute(sql.SQL("SELECT id FROM {} ORDER BY id").format(
        sql.Identifier(tenant.schema, "notification_deliveries"))).fetchall()
    return [int(r[0]) for r in rows]


def accepted_count(conn: Connection, tenants: Sequence[BenchTenant]) -> tuple[int, int]:
    """(accepted, settled otherwise: failed, unknown, cancelled ...) over the bench tenants."""
    accepted = other = 0
    for t in tenants:
        row = conn.execute(sql.SQL(
            "SELECT count(*) FILTER (WHERE status = 'accepted'), "
            "count(*) FILTER (WHERE status NOT IN ('pending', 'sending', 'accepted')) FROM {}"
        ).format(sql.Identifier(t.schema, "notification_deliveries"))).fetchone()
        assert row is not None
        accepted += int(row[0])
        other += int(row[1])
    return accepted, other


# -- one delivery run ----------------------------------------------------------------------


@dataclass(frozen=True)
class DeliveryRun:
    label: str
    deliveries: int
    seconds: float  # first claim .. last acceptance, PostgreSQL's clock
    latencies: list[float]  # claim-to-accepted, seconds, sorted
    worker_cpu: float  # CPU seconds of the worker processes while they sent
    services_cpu: float  # CPU seconds of the embedded PostgreSQL and Redis meanwhile
    endpoint_cpu: float  # CPU seconds of the endpoint meanwhile
    endpoint_rate: float  # requests/s as the endpoint saw them arrive (first..last)
    load_before: str
    load_after: str
    worker_threads: int  # processes x threads
    uncertain_peak: int  # most deliveries provider-called without an outcome at one sample
    samples: int  # how many instants were sampled for it

    @property
    def rate(self) -> float:
        return self.deliveries / self.seconds

    def percentile(self, p: float) -> float:
        return self.latencies[min(len(self.latencies) - 1, int(len(self.latencies) * p))] * 1000


class Failed(Exception):
    """What the bench counted from the outside does not add up."""


def start_worker(processes: int, threads: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """The Procfile's worker line, `tocsin worker --processes P --threads T`."""
    tocsin = str(Path(sys.executable).parent / "tocsin")
    handle = log.open("wb")
    return subprocess.Popen([tocsin, "worker", "--processes", str(processes), "--threads", str(threads)],
                            env=env, stdout=handle, stderr=subprocess.STDOUT)


def settled_cpu(worker: subprocess.Popen[bytes], log: Path) -> float:
    """The worker's CPU seconds once it has started and gone quiet (under 0.05 s of CPU in
    half a second, its processes and threads up, waiting for messages)."""
    deadline = time.monotonic() + START_LIMIT
    before = tree_cpu_seconds(worker.pid)
    while True:
        time.sleep(0.5)
        if worker.poll() is not None:
            raise Failed(f"the worker exited with {worker.returncode}; see {log}")
        now = tree_cpu_seconds(worker.pid)
        if now - before < 0.05 and now > 0.5:
            return now
        if time.monotonic() > deadline:
            raise Failed(f"the worker did not settle within {START_LIMIT:.0f} s; see {log}")
        before = now


def stop(process: subprocess.Popen[bytes], what: str) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        say(f"    {what} did not stop within 60 s after SIGTERM; killing it")
        process.kill()
        process.wait()


class UncertainSampler:
    """What a crash of every worker would leave uncertain, sampled while they send: the
    deliveries whose open attempt is marked provider-called with no outcome recorded (the
    sweeper would make each one unknown and resend it). Read on a connection of its own
    every UNCERTAIN_POLL seconds; the peak is the figure (the goal: at most one per worker
    thread, the calls in flight)."""

    def __init__(self, database_url: str, tenants: Sequence[BenchTenant]):
        self._conn = psycopg.connect(database_url, autocommit=True)
        # An attempt is open only while its delivery is sending under its token: read through
        # the partial index of sending deliveries, the count costs the run almost nothing.
        self._query = sql.SQL(" + ").join(
            sql.SQL("(SELECT count(*) FROM {} d JOIN {} a ON a.delivery_id = d.id "
                    "AND a.claim_token = d.claim_token WHERE d.status = 'sending' "
                    "AND a.provider_called_at IS NOT NULL AND a.ended_at IS NULL)").format(
                sql.Identifier(t.schema, "notification_deliveries"),
                sql.Identifier(t.schema, "delivery_attempts"))
            for t in tenants)
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> UncertainSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()

    def _run(self) -> None:
        statement = sql.SQL("SELECT {}").format(self._query)
        while not self._stop.wait(UNCERTAIN_POLL):
            row = self._conn.execute(statement).fetchone()
            self.peak = max(self.peak, int(row[0]) if row else 0)
            self.samples += 1


def run_deliveries(conn: Connection, endpoint: Endpoint, label: str, count: int, tenants: int,
                   processes: int, threads: int, send_rate: float) -> DeliveryRun:
    from actors.email import EMAILS_PER_MESSAGE, send_deliveries

    drop_bench_tenants(conn)
    started = time.perf_counter()
    built = build(conn, count, tenants)
    vacuum(conn, built)
    say(f"    built {count:,} pending deliveries in {tenants} tenant(s), vacuumed and analysed "
        f"({time.perf_counter() - started:.1f} s)")
    env = dict(os.environ, SES_MAX_SEND_RATE=f"{send_rate:g}")
    log = LOGS / f"worker-{label.replace(' ', '-').replace(',', '')}.log"
    endpoint.reset()
    # The worker starts first, and its CPU is counted from the moment it is settled: its
    # start-up (imports, connections: about 2 CPU seconds a process) is not a delivery's.
    worker = start_worker(processes, threads, env, log)
    try:
        worker_cpu_start = settled_cpu(worker, log)
    except BaseException:
        stop(worker, "the worker")
        raise
    started = time.perf_counter()
    for t in built:
        send_deliveries(t.slug, delivery_ids(conn, t))
    say(f"    enqueued {count:,} deliveries as the product does, {EMAILS_PER_MESSAGE} of a tenant "
        f"per deliver_email message ({time.perf_counter() - started:.1f} s)")
    load_before = load()
    endpoint_cpu = endpoint.cpu_seconds()
    services = service_pids()
    services_cpu = services_cpu_seconds(services)
    with UncertainSampler(env["DATABASE_URL"], built) as sampler:
        worker_cpu = 0.0
        try:
            deadline = time.monotonic() + START_LIMIT + count / 5  # bounds a hang only (>= 5/s)
            while True:
                worker_cpu = max(worker_cpu, tree_cpu_seconds(worker.pid) - worker_cpu_start)
                accepted, other = accepted_count(conn, built)
                if accepted + other >= count:
                    break
                if worker.poll() is not None:
                    raise Failed(f"the worker exited with {worker.returncode}; see {log}")
                if time.monotonic() > deadline:
                    raise Failed(f"only {accepted:,} of {count:,} accepted in time; see {log}")
                time.sleep(0.25)
            worker_cpu = max(worker_cpu, tree_cpu_seconds(worker.pid) - worker_cpu_start)
            # Before the worker stops: its PostgreSQL backends are counted while they live.
            services_cpu = services_cpu_seconds(services) - services_cpu
        finally:
            load_after = load()
            endpoint_cpu = endpoint.cpu_seconds() - endpoint_cpu
            stop(worker, "the worker")
    seconds, latencies = timings(conn, built)
    received = endpoint.received()
    check_exactly_once(conn, built, received, count)
    span = (received["last"] or 0) - (received["first"] or 0)
    return DeliveryRun(label, count, seconds, latencies, worker_cpu, services_cpu, endpoint_cpu,
                       (received["requests"] - 1) / span if span > 0 else float("inf"),
                       load_before, load_after, processes * threads, sampler.peak, sampler.samples)


def timings(conn: Connection, tenants: Sequence[BenchTenant]) -> tuple[float, list[float]]:
    """(first claim .. last acceptance in seconds, every claim-to-accepted in seconds)."""
    first: Any = None
    last: Any = None
    latencies: list[float] = []
    for t in tenants:
        rows = conn.execute(sql.SQL(
            "SELECT a.started_at, d.accepted_at FROM {} d JOIN {} a "
            "ON a.delivery_id = d.id AND a.outcome = 'accepted'"
        ).format(sql.Identifier(t.schema, "notification_deliveries"),
                 sql.Identifier(t.schema, "delivery_attempts"))).fetchall()
        for claimed_at, accepted_at in rows:
            first = claimed_at if first is None or claimed_at < first else first
            last = accepted_at if last is None or accepted_at > last else last
            latencies.append((accepted_at - claimed_at).total_seconds())
    latencies.sort()
    return (last - first).total_seconds(), latencies


def check_exactly_once(conn: Connection, tenants: Sequence[BenchTenant], received: dict[str, Any],
                       count: int) -> None:
    """Every delivery accepted once, after one attempt, with one request at the endpoint and
    its own provider id; no request for anything else. Raises Failed with what differs."""
    problems = []
    accepted_keys: set[str] = set()
    for t in tenants:
        deliveries = sql.Identifier(t.schema, "notification_deliveries")
        attempts = sql.Identifier(t.schema, "delivery_attempts")
        row = conn.execute(sql.SQL(
            """
            SELECT count(*) FILTER (WHERE status = 'accepted'),
                   count(*) FILTER (WHERE status <> 'accepted'),
                   count(*) FILTER (WHERE attempts <> 1),
                   count(DISTINCT provider_message_id),
                   (SELECT count(*) FROM {attempts}),
                   (SELECT count(*) FROM {attempts} WHERE outcome IS DISTINCT FROM 'accepted')
            FROM {deliveries}
            """).format(deliveries=deliveries, attempts=attempts)).fetchone()
        assert row is not None
        ok, not_ok, retried, provider_ids, attempt_rows, bad_attempts = (int(v) for v in row)
        if not_ok or retried or provider_ids != ok or attempt_rows != ok or bad_attempts:
            problems.append(f"{t.slug}: {ok} accepted, {not_ok} not accepted, {retried} with more "
                            f"than one attempt, {provider_ids} distinct provider ids, "
                            f"{attempt_rows} attempt rows ({bad_attempts} not accepted)")
        accepted_keys |= {f"{t.slug}/{r[0]}" for r in conn.execute(sql.SQL(
            "SELECT id FROM {} WHERE status = 'accepted'").format(deliveries)).fetchall()}
    keys: dict[str, int] = received["keys"]
    doubled = {k: n for k, n in keys.items() if n > 1}
    unasked = set(keys) - accepted_keys
    unsent = accepted_keys - set(keys)
    if received["requests"] != count or len(accepted_keys) != count:
        problems.append(f"the endpoint received {received['requests']:,} requests, PostgreSQL "
                        f"holds {len(accepted_keys):,} accepted deliveries; {count:,} expected")
    if doubled:
        problems.append(f"{len(doubled)} deliveries sent more than once, e.g. "
                        f"{sorted(doubled.items())[:5]}")
    if unasked:
        problems.append(f"{len(unasked)} requests for no accepted delivery, e.g. {sorted(unasked)[:5]}")
    if unsent:
        problems.append(f"{len(unsent)} accepted deliveries never reached the endpoint, e.g. "
                        f"{sorted(unsent)[:5]}")
    if problems:
        raise Failed("; ".join(problems))
    say(f"    counted from outside: {received['requests']:,} requests at the endpoint, "
        f"{len(accepted_keys):,} accepted rows, each delivery once, one attempt each")


# -- ceilings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ceiling:
    label: str
    messages: int
    seconds: float
    endpoint_cpu: float | None = None  # CPU seconds of the endpoint meanwhile (provider client only)
    cpu: float = 0.0  # CPU seconds of the processes doing the work (no-op worker, SES client senders)
    load: str = ""

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def noop_ceiling(broker: Broker, count: int, processes: int, threads: int) -> Ceiling:
    """``count`` messages for the no-op actor, enqueued first; then a worker with P
    processes x T threads; timed from the first acknowledgement seen to the last, by
    watching the queue's message hash in Redis (a message leaves it when acknowledged), or
    on RabbitMQ from the first message fetched to the last (its ready count)."""
    from bench.noop_actor import noop

    left = _noop_messages_left(broker)
    for number in range(count):
        noop.send(number)
    if left() != count:
        raise Failed(f"{left()} no-op messages in {broker.name}, {count} enqueued")
    log = LOGS / f"noop-worker-{broker.name}-{processes}.log"
    load_before = load()
    with log.open("wb") as handle:
        worker = subprocess.Popen(
            [sys.executable, "-m", "dramatiq", "bench.noop_actor:boot", "--queues", NOOP_QUEUE,
             "--processes", str(processes), "--threads", str(threads)],
            stdout=handle, stderr=subprocess.STDOUT,
        )
        try:
            first: tuple[float, int] | None = None
            worker_cpu = cpu_at_first = 0.0
            deadline = time.monotonic() + START_LIMIT + count / 50
            while True:
                worker_cpu = max(worker_cpu, tree_cpu_seconds(worker.pid))
                remaining = left()
                now = time.perf_counter()
                if first is None and remaining < count:
                    first = (now, remaining)
                    cpu_at_first = worker_cpu  # its start-up is not a message's
                if remaining == 0:
                    break
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise Failed(f"the no-op worker left {remaining:,} messages; see {log}")
                time.sleep(POLL)
        finally:
            stop(worker, "the no-op worker")
    assert first is not None
    # From the first look that found acknowledgements: the messages still there then, and the
    # CPU spent on them since.
    return Ceiling(f"no-op actor, {broker.name}, {processes} x {threads}", first[1], now - first[0],
                   cpu=worker_cpu - cpu_at_first, load=f"{load_before} -> {load()}")


def _noop_messages_left(broker: Broker) -> Callable[[], int]:
    """How many no-op messages the broker still holds: on Redis the queue's message hash
    (acknowledged ones leave it), on RabbitMQ the ready ones (fetched ones leave it)."""
    from tocsin.core.settings import load_settings
    from tocsin.messaging.broker import current_broker

    if broker.url is not None:
        from tocsin.messaging.rabbitmq_broker import OneConnectionRabbitmqBroker

        installed = current_broker()
        assert isinstance(installed, OneConnectionRabbitmqBroker), "Broker.install() first"
        return lambda: installed.get_queue_message_counts(NOOP_QUEUE)[0]
    import redis

    settings = load_settings()
    client = redis.Redis.from_url(settings.redis_url)
    pending_key = f"{settings.dramatiq_namespace}:{NOOP_QUEUE}.msgs"
    return lambda: int(client.hlen(pending_key))


def _client_sender(process_no: int, threads: int, count: int, ready: Any, go: Any, done: Any,
                   cpu: Any) -> None:
    """One process of the provider ceiling: the product's SES client (SesMailer's SendEmail
    caller, tocsin/providers/ses_api.py) with the production settings, T threads sharing it
    (as a worker process shares its mailer), each sending its share of one representative
    message in a bare loop."""
    from tocsin.core.settings import load_settings
    from tocsin.providers.ses import OutgoingEmail, SesMailer

    settings = load_settings()
    mailer = SesMailer(settings)
    api = mailer.api  # the bare call, without the composing SesMailer.send adds
    raw = mailer.compose(OutgoingEmail(
        "<bench@tocsin.example>", "member1@bench-deliver.example", "Access ends in 30 days",
        "Access for Client 1 ends in 30 days. Renew to keep access.\n\nhttp://127.0.0.1/clients/1",
        {}, unsubscribe_url="http://127.0.0.1/unsubscribe/x"))
    share = [count // threads + (1 if t < count % threads else 0) for t in range(threads)]

    def send(thread_no: int) -> None:
        for i in range(share[thread_no]):
            api.send_raw(settings.mail_from, "member1@bench-deliver.example", raw,
                         {"tenant": f"client-{process_no}-{thread_no}", "delivery": str(i)})

    ready.release()
    go.wait()
    started = time.process_time()
    senders = [threading.Thread(target=send, args=(t,)) for t in range(threads)]
    for s in senders:
        s.start()
    for s in senders:
        s.join()
    cpu.put(time.process_time() - started)
    done.release()


def client_ceiling(endpoint: Endpoint, count: int, processes: int, threads: int) -> Ceiling:
    spawn = multiprocessing.get_context("spawn")
    ready, done, go, cpu = spawn.Semaphore(0), spawn.Semaphore(0), spawn.Event(), spawn.Queue()
    shares = [count // processes + (1 if p < count % processes else 0) for p in range(processes)]
    endpoint.reset()
    senders = [spawn.Process(target=_client_sender, args=(p, threads, shares[p], ready, go, done, cpu))
               for p in range(processes)]
    for s in senders:
        s.start()
    for _ in senders:
        if not ready.acquire(timeout=START_LIMIT):
            raise Failed("an SES client sender process did not start")
    load_before = load()
    endpoint_cpu = endpoint.cpu_seconds()
    started = time.perf_counter()
    go.set()
    for _ in senders:
        if not done.acquire(timeout=START_LIMIT + count / 20):
            raise Failed("an SES client sender process did not finish")
    seconds = time.perf_counter() - started
    endpoint_cpu = endpoint.cpu_seconds() - endpoint_cpu
    sender_cpu = sum(cpu.get(timeout=30) for _ in senders)
    for s in senders:
        s.join(timeout=30)
        if s.exitcode != 0:
            raise Failed(f"an SES client sender process exited with {s.exitcode}")
    received = endpoint.received()
    if received["requests"] != count or len(received["keys"]) != count:
        raise Failed(f"SES client loop: {count:,} sent, the endpoint received {received['requests']:,} "
                     f"({len(received['keys']):,} distinct)")
    return Ceiling(f"bare SES client loop, {processes} x {threads}", count, seconds, endpoint_cpu,
                   cpu=sender_cpu, load=f"{load_before} -> {load()}")


@contextlib.contextmanager
def rabbitmq_vhost(url: str, vhost: str) -> Iterator[str]:
    """A vhost of the bench's own on the RabbitMQ at ``url`` (Dramatiq's queues there carry
    no prefix); its URL. Deleted afterwards, with whatever is left in it."""
    from tests.support.rabbitmq import create_vhost, delete_vhost, unreachable_reason

    reason = unreachable_reason(url)
    if reason is not None:
        raise Failed(reason)
    made = create_vhost(url, vhost)
    try:
        yield made
    finally:
        REDIS.install()  # closes this process's connections to the vhost
        delete_vhost(url, vhost)


# -- report ------------------------------------------------------------------------------


def report_throughput(runs: list[tuple[DeliveryRun, Ceiling, Ceiling]], threads: int) -> None:
    say()
    say("Figures (rates in messages/s; ratio = deliveries/s over the lower ceiling)")
    say(f"  {'processes x threads':<20} {'deliveries/s':>12} {'no-op/s':>9} {'client/s':>9} "
        f"{'ratio':>6} {'p50 ms':>7} {'p99 ms':>7} {'worker CPU ms/delivery':>23} "
        f"{'uncertain peak':>14}")
    for run, noop, boto in runs:
        lower = min(noop.rate, boto.rate)
        say(f"  {run.label:<20} {run.rate:>12,.0f} {noop.rate:>9,.0f} {boto.rate:>9,.0f} "
            f"{run.rate / lower:>6.2f} {run.percentile(0.50):>7.1f} {run.percentile(0.99):>7.1f} "
            f"{run.worker_cpu / run.deliveries * 1000:>23.2f} {run.uncertain_peak:>14}")
    say()
    say("Uncertain peak: the most deliveries marked provider-called without an outcome at one")
    say("sampled instant, what a kill -9 of every worker at that instant would make unknown and")
    say(f"resend (sampled every {UNCERTAIN_POLL * 1000:.0f} ms; goal: at most the worker threads, "
        "the calls in flight)")
    for run, _, _ in runs:
        say(f"  {run.label}: peak {run.uncertain_peak} over {run.samples:,} samples, "
            f"{run.worker_threads} worker threads (goal <= {run.worker_threads}: "
            f"{'met' if run.uncertain_peak <= run.worker_threads else 'NOT met'})")
    say()
    for run, noop, boto in runs:
        lower = min(noop.rate, boto.rate)
        ratio = run.rate / lower
        say(f"  {run.label}: ratio {ratio:.2f} to the {'no-op' if noop.rate <= boto.rate else 'SES client'} "
            f"ceiling (goal >= {GOAL_RATIO}: {'met' if ratio >= GOAL_RATIO else 'NOT met'}); "
            f"endpoint busy {run.endpoint_cpu / run.seconds:.0%} of one CPU while delivering, "
            f"{(boto.endpoint_cpu or 0) / boto.seconds:.0%} during the SES client loop")
        say(f"      load average: deliveries {run.load_before} -> {run.load_after}; "
            f"no-op {noop.load}; SES client {boto.load}")
    say()
    say("CPU per message, ms (CPU time suffers far less than wall time from the machine's other")
    say("load; the cost ratio is a bare SES call's total over the delivery's: the ratio a machine with its")
    say("CPUs to itself would approach once CPU-bound)")
    say(f"  {'processes x threads':<20} {'delivery: worker':>16} {'+ PG/Redis':>10} {'+ endpoint':>10} "
        f"{'= total':>8} {'no-op worker':>12} {'client senders':>15} {'+ endpoint':>10} "
        f"{'cost ratio':>10}")
    for run, noop, boto in runs:
        per = 1000 / run.deliveries
        delivery = (run.worker_cpu + run.services_cpu + run.endpoint_cpu) * per
        send = (boto.cpu + (boto.endpoint_cpu or 0)) * 1000 / boto.messages
        say(f"  {run.label:<20} {run.worker_cpu * per:>16.2f} {run.services_cpu * per:>10.2f} "
            f"{run.endpoint_cpu * per:>10.2f} {delivery:>8.2f} {noop.cpu * 1000 / noop.messages:>12.2f} "
            f"{boto.cpu * 1000 / boto.messages:>15.2f} "
            f"{(boto.endpoint_cpu or 0) * 1000 / boto.messages:>10.2f} "
            f"{send / delivery:>10.2f}")
    say()
    say("Markdown for the README:")
    say()
    say("| worker (processes x threads) | deliveries/s | no-op actor/s | bare SES client/s | ratio "
        "| p50 claim-to-accepted | p99 | uncertain peak |")
    say("|---|---:|---:|---:|---:|---:|---:|---:|")
    for run, noop, boto in runs:
        say(f"| {run.label} | {run.rate:,.0f} | {noop.rate:,.0f} | {boto.rate:,.0f} | "
            f"{run.rate / min(noop.rate, boto.rate):.2f} | {run.percentile(0.50):.0f} ms | "
            f"{run.percentile(0.99):.0f} ms | {run.uncertain_peak} |")


def report_brokers(runs: list[tuple[DeliveryRun, Ceiling, Ceiling]], brokers: Sequence[Broker]) -> None:
    """Deliveries/s of each broker, one line per worker size (the runs alternate brokers)."""
    say()
    say("Brokers side by side (deliveries/s; no-op actor/s in brackets)")
    say(f"  {'processes x threads':<20} " + " ".join(f"{b.name:>22}" for b in brokers)
        + f" {brokers[-1].name + ' / ' + brokers[0].name:>20}")
    for start in range(0, len(runs), len(brokers)):
        row = runs[start:start + len(brokers)]
        size = row[0][0].label.split(" ", 1)[1]
        cells = " ".join(f"{run.rate:>10,.0f} ({noop.rate:>8,.0f}) " for run, noop, _ in row)
        say(f"  {size:<20} {cells} {row[-1][0].rate / row[0][0].rate:>19.2f}")


def report_rate(run: DeliveryRun, limit: float) -> bool:
    off = run.endpoint_rate / limit - 1
    within = abs(off) <= RATE_TOLERANCE
    say()
    say(f"Rate limit: SES_MAX_SEND_RATE={limit:g}, {run.deliveries:,} deliveries, {run.label}")
    say(f"  the endpoint received {run.endpoint_rate:.2f} requests/s (first to last request); "
        f"{off:+.1%} from the limit (goal within {RATE_TOLERANCE:.0%}: "
        f"{'met' if within else 'NOT met'})")
    say(f"  deliveries/s by PostgreSQL (first claim to last acceptance): {run.rate:.2f}; "
        f"p50/p99 claim-to-accepted {run.percentile(0.50):.0f}/{run.percentile(0.99):.0f} ms "
        "(waiting for a send slot included)")
    say(f"  uncertain peak: {run.uncertain_peak} deliveries provider-called without an outcome "
        f"({run.samples:,} samples)")
    say(f"  load average {run.load_before} -> {run.load_after}")
    return within


# -- main --------------------------------------------------------------------------------


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def process_counts(text: str) -> list[int]:
    try:
        counts = [positive(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma-separated list of counts, got {text!r}") from None
    return counts


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.deliver",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--deliveries", type=positive, default=20_000,
                        help="deliveries per throughput run (20000)")
    parser.add_argument("--tenants", type=positive, default=4, help="tenants to spread them over (4)")
    parser.add_argument("--processes", type=process_counts, default=[1, 2],
                        help="worker processes, one throughput run each (1,2)")
    parser.add_argument("--threads", type=positive, default=4,
                        help="threads per worker process (4, as the Procfile)")
    parser.add_argument("--send-rate", type=float, default=50.0,
                        help="SES_MAX_SEND_RATE of the rate-limit run, emails/s (50; 0 skips it)")
    parser.add_argument("--rate-deliveries", type=positive, default=2_000,
                        help="deliveries in the rate-limit run (2000)")
    parser.add_argument("--skip-throughput", action="store_true",
                        help="only the rate-limit run")
    parser.add_argument("--keep", action="store_true", help="keep the bench tenants afterwards")
    parser.add_argument("--broker-url", default=os.environ.get("BROKER_URL") or None,
                        help="a RabbitMQ (amqp://...) to run every throughput run on as well as "
                             "on Redis, in a vhost of its own (default: BROKER_URL)")
    args = parser.parse_args(argv)
    if args.tenants > args.deliveries or args.tenants > args.rate_deliveries:
        parser.error("--tenants must not exceed the deliveries")
    if args.send_rate < 0:
        parser.error("--send-rate must be 0 (skip) or positive")
    if args.broker_url is not None and not args.broker_url.startswith(("amqp://", "amqps://")):
        parser.error(f"--broker-url must be an amqp:// or amqps:// URL, got {args.broker_url!r}")
    return args


def run(args: argparse.Namespace, endpoint: Endpoint, brokers: Sequence[Broker]) -> bool:
    from db.platform.migrations import migrate_all
    from tocsin.core.settings import load_settings

    settings = load_settings()
    migrate_all()
    conn = psycopg.connect(settings.database_url, autocommit=True)
    try:
        def show(name: str) -> str:
            row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
            return "?" if row is None else str(row[0])

        say(f"Machine: {os.cpu_count()} CPUs, PostgreSQL {show('server_version')} "
            f"(synchronous_commit={show('synchronous_commit')}, fsync={show('fsync')}), "
            f"Python {sys.version.split()[0]}; load average {load()} (other work shares it)")
        dropped = drop_bench_tenants(conn)
        if dropped:
            say(f"Dropped {dropped} bench tenant(s) left by an earlier run")
        goals = True
        if not args.skip_throughput:
            runs = []
            for processes in args.processes:
                delivered_noop = []
                for broker in brokers:
                    broker.install()
                    label = f"{broker.name} {processes} x {args.threads}" if len(brokers) > 1 \
                        else f"{processes} x {args.threads}"
                    say(f"Deliveries on {broker.name}, tocsin worker --processes {processes} "
                        f"--threads {args.threads}, SES_MAX_SEND_RATE={UNLIMITED_RATE:g} ...")
                    delivered = run_deliveries(conn, endpoint, label, args.deliveries, args.tenants,
                                               processes, args.threads, UNLIMITED_RATE)
                    say(f"    {delivered.rate:,.0f} deliveries/s; load {delivered.load_before} -> "
                        f"{delivered.load_after}")
                    say(f"Ceiling: no-op actor on {broker.name}, {processes} x {args.threads} ...")
                    noop = noop_ceiling(broker, args.deliveries, processes, args.threads)
                    say(f"    {noop.rate:,.0f} messages/s; load {noop.load}")
                    delivered_noop.append((delivered, noop))
                say(f"Ceiling: bare SES client loop, {processes} x {args.threads} ...")
                boto = client_ceiling(endpoint, args.deliveries, processes, args.threads)
                say(f"    {boto.rate:,.0f} sends/s; load {boto.load}")
                for delivered, noop in delivered_noop:
                    runs.append((delivered, noop, boto))
                    goals &= delivered.rate / min(noop.rate, boto.rate) >= GOAL_RATIO
                    goals &= delivered.uncertain_peak <= delivered.worker_threads
            report_throughput(runs, args.threads)
            if len(brokers) > 1:
                report_brokers(runs, brokers)
        REDIS.install()
        if args.send_rate > 0:
            processes = max(args.processes)
            label = f"{processes} x {args.threads}"
            say()
            say(f"Deliveries, tocsin worker --processes {processes} --threads {args.threads}, "
                f"SES_MAX_SEND_RATE={args.send_rate:g} ...")
            limited = run_deliveries(conn, endpoint, label, args.rate_deliveries, args.tenants,
                                     processes, args.threads, args.send_rate)
            goals &= report_rate(limited, args.send_rate)
            goals &= limited.uncertain_peak <= limited.worker_threads
        return goals
    finally:
        if not args.keep:
            drop_bench_tenants(conn)
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    LOGS.mkdir(parents=True, exist_ok=True)
    from tocsin.shell.services import free_port

    endpoint = Endpoint(free_port())
    stop_services: Callable[[], None] | None = None
    os.environ["SES_ENDPOINT_URL"] = endpoint.url
    stack = contextlib.ExitStack()
    try:
        if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
            from tocsin.shell.services import start_embedded

            services = start_embedded(LOGS, dict(os.environ))
            os.environ.update(services.env)
            for line in services.started:
                say(f"started {line}")
            stop_services = services.stop
        # Set before actors (and so the broker) are imported, and handed to the workers:
        # nothing leaks into other queues, and the send-slot key is the bench's own.
        os.environ["DRAMATIQ_NAMESPACE"] = f"tocsin-bench-{uuid.uuid4().hex[:8]}"
        os.environ["SES_MAX_SEND_RATE"] = f"{UNLIMITED_RATE:g}"
        # The workers refuse the published default secret; the bench's own is random.
        os.environ.setdefault("SESSION_SECRET", secrets.token_urlsafe(48))
        say(f"bench SES endpoint at {endpoint.url}; dramatiq namespace "
            f"{os.environ['DRAMATIQ_NAMESPACE']}; logs in {LOGS}")
        from tocsin.core.settings import load_settings

        # This process enqueues like any other of the product's; the broker is the bench's
        # choice (Broker.install), so BROKER_URL from the environment is not read here.
        os.environ.pop("BROKER_URL", None)
        from tocsin import boot

        boot.start_messaging(boot.start(load_settings()))
        brokers = [REDIS]
        if args.broker_url is not None:
            rabbitmq = stack.enter_context(rabbitmq_vhost(args.broker_url,
                                                          os.environ["DRAMATIQ_NAMESPACE"]))
            brokers.append(Broker("RabbitMQ", rabbitmq))
            say(f"RabbitMQ vhost {os.environ['DRAMATIQ_NAMESPACE']} at {args.broker_url.split('@')[-1]}")
        met = run(args, endpoint, brokers)
    except Failed as error:
        say()
        say(f"FAILED: {error}")
        return 1
    finally:
        try:
            stack.close()  # REDIS.install() first: the RabbitMQ broker's connections closed
        finally:
            endpoint.stop()
            if stop_services is not None:
                stop_services()
    say()
    say("All goals met." if met else "Some goals were NOT met (see above).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
