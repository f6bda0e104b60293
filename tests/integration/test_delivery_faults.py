"""Faults injected into a run of many sends: a worker killed with SIGKILL, Redis flushed,
the workers' Postgres connections terminated, a provider failing one send in five. After
recovery every delivery is accepted exactly once (or, where the provider's answer was
lost, resent once with the same Message-ID); none is lost.

The fault-injecting endpoint holds the provider's answers after a chosen number of sends,
so each fault lands at a known point of the run, not at a moment picked by a timer.
"""

from __future__ import annotations

import bisect
import itertools
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
import redis

from actors.email import deliver_email
from actors.sweep import sweep
from db.delivery.sweep import run_sweep
from db.notices.scan import run_scan
from db.platform.tenancy import Tenant, tenant_tx
from domain.delivery.states import ErrorClass
from tests.integration.builders import add_clients_in_bulk, run_concurrently
from tests.integration.conftest import OpsInbox, RunningWorker, SesOutbox, use_settings, wait_until
from tests.integration.test_deliver_email import FailingMailer
from tests.support.faulty_ses import FaultySes
from tests.support.rabbitmq import lose_every_message
from tocsin.core.settings import load_settings
from tocsin.providers.send_rate import SendRateLimiter, Slots, set_limiter
from tocsin.providers.ses import SesMailer, set_mailer
from tocsin.shell.processes import WORKER_BROKER

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)
THREADS = 4  # worker threads: the number of sends in flight when the answers are held


def _deliveries(tenant: Tenant, clients: int, users: int = 5) -> list[int]:
    add_clients_in_bulk(tenant, clients, AS_OF.date() + timedelta(days=7), users)
    run_scan(tenant.slug, AS_OF)  # claims, and enqueues one message per delivery
    with tenant_tx(tenant.slug) as tx:
        return [int(str(r[0])) for r in tx.conn.execute(
            "SELECT id FROM notification_deliveries ORDER BY id").fetchall()]


def _statuses(tenant: Tenant) -> Counter[str]:
    with tenant_tx(tenant.slug) as tx:
        return Counter(str(r[0]) for r in tx.conn.execute(
            "SELECT status FROM notification_deliveries").fetchall())


def _uncertain(tenant: Tenant) -> set[int]:
    """Deliveries with an attempt whose outcome was unknown."""
    with tenant_tx(tenant.slug) as tx:
        return {int(str(r[0])) for r in tx.conn.execute(
            "SELECT DISTINCT delivery_id FROM delivery_attempts WHERE outcome = 'unknown'").fetchall()}


def _time_passes(tenant: Tenant) -> None:
    """Every lease runs out, every retry falls due, every enqueued message counts as old."""
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute(
            "UPDATE notification_deliveries SET lease_until = now() - interval '1 second' "
            "WHERE status = 'sending'")
        tx.conn.execute(
            "UPDATE notification_deliveries SET send_after = now(), "
            "enqueued_at = now() - interval '1 hour' WHERE status IN ('pending', 'deferred')")


def _recover(tenant: Tenant, worker: RunningWorker, monkeypatch: pytest.MonkeyPatch) -> None:
    use_settings(reconcile_window_seconds=0)
    for _ in range(8):
        _time_passes(tenant)
        run_sweep(tenant.slug)
        worker.drain()
        if set(_statuses(tenant)) == {"accepted"}:
            return


def _copies(ses: SesOutbox, tenant: Tenant) -> Counter[int]:
    """Copies the provider accepted, per delivery id (read from the Message-ID)."""
    marker = f".{tenant.slug}@"
    return Counter(int(m.message_id.split(".")[0].removeprefix("<delivery-"))
                   for m in ses.sent() if marker in m.message_id)


def _assert_each_sent_once_or_reconciled(tenant: Tenant, ses: SesOutbox, ids: list[int]) -> None:
    assert _statuses(tenant) == Counter({"accepted": len(ids)})
    copies = _copies(ses, tenant)
    assert set(copies) == set(ids)  # none lost
    uncertain = _uncertain(tenant)
    for delivery_id in ids:
        # An answer lost in flight may cost one resend, with the same Message-ID; nothing else may.
        assert copies[delivery_id] <= (2 if delivery_id in uncertain else 1), delivery_id


def _worker_process(endpoint: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SES_ENDPOINT_URL": endpoint}
    return subprocess.Popen(
        [sys.executable, "-m", "dramatiq", WORKER_BROKER, "--processes", "1", "--threads", str(THREADS)],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def test_kill_9_a_worker_in_the_middle_of_200_sends(
    tenant: Tenant, ses: SesOutbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = _deliveries(tenant, clients=40)
    assert len(ids) == 200
    with FaultySes(ses.endpoint, policy=lambda n: "hold" if n > 60 else "pass") as proxy:
        process = _worker_process(proxy.url)
        try:
            # 60 sends answered, then every worker thread waits on an answer SES already has.
            wait_until(lambda: proxy.count("hold") == THREADS, "four sends in flight")
            in_flight = proxy.held_now(tenant.slug)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert proxy.count() == 60 + THREADS
    # What the killed worker had marked provider-called and not yet recorded: exactly the
    # calls in flight, one per thread; every answered call was recorded as it came.
    with tenant_tx(tenant.slug) as tx:
        called = {int(str(r[0])) for r in tx.conn.execute(
            "SELECT delivery_id FROM delivery_attempts "
            "WHERE provider_called_at IS NOT NULL AND ended_at IS NULL").fetchall()}
    assert called == in_flight and len(called) == THREADS

    worker = RunningWorker()
    try:
        _recover(tenant, worker, monkeypatch)
    finally:
        worker.stop()
    _assert_each_sent_once_or_reconciled(tenant, ses, ids)
    assert _uncertain(tenant) == called  # exactly those: every other delivery was sent once


def test_redis_flushall_in_the_middle_of_a_run(
    tenant: Tenant, ses: SesOutbox, worker: RunningWorker
) -> None:
    with FaultySes(ses.endpoint, policy=lambda n: "hold" if n > 50 else "pass") as proxy:
        set_mailer(SesMailer(replace(load_settings(), ses_endpoint_url=proxy.url)))
        try:
            sweep()  # a sweep before the flush leaves its marker in Redis
            ids = _deliveries(tenant, clients=40)
            wait_until(lambda: proxy.count("hold") == THREADS, "four sends in flight")
            redis.Redis.from_url(load_settings().redis_url).flushall()  # every queued message is gone
            settings = load_settings()
            if settings.broker_url:  # ... from RabbitMQ when it carries them (a reset node)
                lose_every_message(settings.broker_url, worker.broker.get_declared_queues(),
                                   settings.dramatiq_namespace)
            proxy.release()
            worker.drain()
            # What Redis held is lost (the messages the worker had fetched still ran); Postgres
            # still has it.
            assert _statuses(tenant)["pending"] > 0
            sweep()  # no marker: Redis was emptied, so every due delivery is enqueued again
            worker.drain()
        finally:
            set_mailer(None)
    assert _statuses(tenant) == Counter({"accepted": 200})
    assert set(_copies(ses, tenant).values()) == {1}  # and none twice
    assert set(_copies(ses, tenant)) == set(ids)


def test_workers_postgres_connections_terminated_mid_run(
    tenant: Tenant, ses: SesOutbox, worker: RunningWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FaultySes(ses.endpoint, policy=lambda n: "hold" if n > 50 else "pass") as proxy:
        set_mailer(SesMailer(replace(load_settings(), ses_endpoint_url=proxy.url)))
        try:
            ids = _deliveries(tenant, clients=40)
            wait_until(lambda: proxy.count("hold") == THREADS, "four sends in flight")
            with psycopg.connect(load_settings().database_url, autocommit=True) as admin:
                terminated = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND backend_type = 'client backend'").fetchone()
            assert terminated is not None and int(str(terminated[0])) >= 1
            proxy.release()  # the held answers arrive; their writes need a new connection
            worker.drain()
            _recover(tenant, worker, monkeypatch)
        finally:
            set_mailer(None)
    assert _statuses(tenant) == Counter({"accepted": 200})
    assert set(_copies(ses, tenant).values()) == {1}  # recovered without a single duplicate
    assert set(_copies(ses, tenant)) == set(ids)


def test_20_percent_transient_failures_over_500_sends_all_accepted_within_the_rate(
    tenant: Tenant, faulty_ses: FaultySes, ses: SesOutbox, worker: RunningWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rate = 50.0  # sends per second, shared by every worker thread
    client = redis.Redis.from_url(load_settings().redis_url)
    limiter = RecordingLimiter(client, f"test-rate-{uuid.uuid4().hex}", rate)
    set_limiter(limiter)
    faulty_ses.policy = lambda n: "fail" if n % 5 == 0 else "pass"
    try:
        ids = _deliveries(tenant, clients=100)
        worker.drain()
        _recover(tenant, worker, monkeypatch)
    finally:
        set_limiter(None)
    assert len(ids) == 500
    assert _statuses(tenant) == Counter({"accepted": 500})
    assert set(_copies(ses, tenant).values()) == {1} and len(_copies(ses, tenant)) == 500
    failed = faulty_ses.count("fail")
    assert failed >= 100
    with tenant_tx(tenant.slug) as tx:
        outcomes = Counter(str(r[0]) for r in tx.conn.execute(
            "SELECT outcome FROM delivery_attempts").fetchall())
    assert outcomes == Counter({"accepted": 500, "retry": failed})  # every attempt recorded
    # The rate held. Every provider call had a slot, and no one-second window of the shared
    # schedule (Redis' clock, exact) holds more slots than the rate ...
    slots = sorted(limiter.slots)
    assert len(slots) == faulty_ses.count()
    busiest = max(bisect.bisect_left(slots, start + 1_000_000) - i for i, start in enumerate(slots))
    assert busiest <= rate, busiest
    # ... and the provider saw no more than the rate on average (what it saw in any single
    # second also carries the jitter between a slot and its request leaving this process).
    times = sorted(s.at for s in faulty_ses.sends)
    assert (len(times) - 1) / (times[-1] - times[0]) <= rate * 1.02


class RecordingLimiter(SendRateLimiter):
    """The shared limiter, noting every slot it was granted."""

    def __init__(self, client: redis.Redis, key: str, per_second: float):
        super().__init__(client, key, per_second)
        self.slots: list[int] = []
        self._lock = threading.Lock()

    def reserve(self, count: int) -> Slots:
        slots = super().reserve(count)
        with self._lock:
            self.slots.extend(slots.at_us)
        return slots


def test_the_send_rate_limiter_spaces_every_slot_across_threads() -> None:
    """The schedule itself, read from the slots Redis granted: exact, whatever the timing."""
    client = redis.Redis.from_url(load_settings().redis_url)
    limiter = SendRateLimiter(client, f"test-rate-{uuid.uuid4().hex}", per_second=200)
    slots: list[int] = []
    lock = threading.Lock()

    def take(n: int) -> None:
        for _ in range(n):
            slot = limiter.acquire()
            with lock:
                slots.append(slot.at_us)

    threads = [threading.Thread(target=take, args=(25,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    slots.sort()
    assert len(slots) == len(set(slots)) == 200
    assert min(b - a for a, b in itertools.pairwise(slots)) >= 5_000  # µs: 1/200 s


def test_a_permanent_failure_ends_failed_is_visible_and_alerted_exactly_once(
    tenant: Tenant, faulty_ses: FaultySes, ses: SesOutbox, ops_inbox: OpsInbox
) -> None:
    faulty_ses.policy = lambda n: "pass"
    [delivery_id] = _deliveries(tenant, clients=1, users=1)
    set_mailer(FailingMailer(ErrorClass.PERMANENT, failures=1))
    deliver_email(tenant.slug, delivery_id)
    assert _statuses(tenant) == Counter({"failed": 1})

    # Two clocks sweep at the same moment, and one again later.
    assert run_concurrently(lambda: run_sweep(tenant.slug), lambda: run_sweep(tenant.slug)) == []
    run_sweep(tenant.slug)
    alerts = [m for m in ops_inbox.messages() if f"delivery {delivery_id} " in m and tenant.slug in m]
    assert len(alerts) == 1 and "failed after 1 attempt(s)" in alerts[0]
