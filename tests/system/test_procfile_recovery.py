"""Faults under the Procfile's processes, and the running system's recovery with no manual
command: the workers killed with SIGKILL and started again, Redis flushed, a worker frozen
with SIGSTOP while it holds a lease, one Dramatiq worker process crashing.

The fault-injecting endpoint holds the provider's answers after a chosen number of sends,
so each fault lands at a known point of the run (every worker thread waiting on a send SES
already has), not at a moment picked by a timer.
"""

from __future__ import annotations

import os
import signal
import urllib.parse
from collections import Counter
from collections.abc import Callable
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import redis

from actors.email import EMAILS_PER_MESSAGE
from db.tenancy import Tenant
from tests.integration.builders import add_client, add_clients_in_bulk, scalar
from tests.integration.conftest import SesOutbox, wait_until
from tests.support.faulty_ses import FaultySes
from tests.support.procfile_stack import ProcfileStack, connected_to, stopped
from tests.support.rabbitmq import lose_every_message
from tests.system.outcomes import (
    RECOVERY_LIMIT,
    assert_each_accepted_once,
    copies,
    delivery_ids,
    provider_called_unrecorded,
    statuses,
    uncertain,
)
from tocsin.config import load_settings
from tocsin.queues import PRODUCT_QUEUES

PROCESSES, THREADS = 2, 4  # the Procfile's defaults, stated so the tests can count threads
IN_FLIGHT = PROCESSES * THREADS  # sends waiting on held answers when every thread is busy
WORKERS = {"WORKER_PROCESSES": str(PROCESSES), "WORKER_THREADS": str(THREADS)}


def _today(tenant: Tenant) -> date:
    return datetime.now(ZoneInfo(tenant.time_zone)).date()


def _deliveries(tenant: Tenant, clients: int = 50, users: int = 5) -> int:
    add_clients_in_bulk(tenant, clients, _today(tenant) + timedelta(days=7), users)
    return clients * users


def _every_thread_waiting(provider: FaultySes) -> None:
    wait_until(lambda: provider.count("hold") >= IN_FLIGHT,
               "every worker thread to wait on a send SES already has", RECOVERY_LIMIT)


def _all_accepted(tenant: Tenant, count: int) -> None:
    wait_until(lambda: statuses(tenant) == Counter({"accepted": count}),
               f"all {count} deliveries to be accepted", RECOVERY_LIMIT)


def test_kill_9_of_the_worker_processes_in_the_middle_of_250_sends_then_a_restart(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    count = _deliveries(tenant)
    with FaultySes(ses.endpoint, policy=lambda n: "hold" if n > 60 else "pass") as provider:
        stack = procfile(SES_ENDPOINT_URL=provider.url, **WORKERS).start_all()
        _every_thread_waiting(provider)
        stack.line("worker").kill_everything()  # the answers SES has die with the workers
        # What the killed workers had marked provider-called with no outcome recorded: the
        # sends in flight, the answered ones of each thread's message (its acceptances are
        # recorded together), and the message's sends not yet made; and what SES has.
        called = provider_called_unrecorded(tenant)
        sent_before = set(copies(ses, tenant))
        provider.policy = lambda n: "pass"
        provider.release()
        stack.start("worker")
        _all_accepted(tenant, count)
    ids = delivery_ids(tenant)
    assert_each_accepted_once(tenant, ses, ids)
    assert provider.count("hold") <= len(called) <= IN_FLIGHT * EMAILS_PER_MESSAGE
    # Exactly those are unknown, and resent with their Message-ID: twice at SES for those it
    # had before the kill, once for the others.
    assert uncertain(tenant) == called
    assert copies(ses, tenant) == Counter({i: 2 if i in called and i in sent_before else 1
                                           for i in ids})


def test_redis_flushall_in_the_middle_of_sending_loses_and_doubles_nothing(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    count = _deliveries(tenant)
    with FaultySes(ses.endpoint, policy=lambda n: "hold" if n > 50 else "pass") as provider:
        stack = procfile(SES_ENDPOINT_URL=provider.url, **WORKERS).start_all()
        _every_thread_waiting(provider)
        assert statuses(tenant)["pending"] > 0  # their messages are in Redis, and only there
        redis.Redis.from_url(load_settings().redis_url).flushall()
        if stack.env.get("BROKER_URL"):  # RabbitMQ carries the messages: it loses them too
            lose_every_message(stack.env["BROKER_URL"], PRODUCT_QUEUES, stack.namespace)
        provider.policy = lambda n: "pass"
        provider.release()
        # Nothing is re-sent by hand: the running sweep notices the flush.
        _all_accepted(tenant, count)
        stack.sweeps_done(2)
    assert copies(ses, tenant) == Counter(dict.fromkeys(delivery_ids(tenant), 1))  # none doubled


def test_a_worker_stopped_while_it_holds_a_lease_is_recovered_by_the_running_system(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    add_client(tenant, _today(tenant) + timedelta(days=7), name="Frozen Ltd")
    with FaultySes(ses.endpoint, policy=lambda n: "hold" if n == 1 else "pass") as provider:
        # Two worker processes of one thread each: one freezes, the other carries on.
        stack = procfile(SES_ENDPOINT_URL=provider.url, WORKER_PROCESSES="2",
                         WORKER_THREADS="1").start_all()
        wait_until(lambda: provider.count("hold") == 1, "the send to be in flight")
        port = int(urllib.parse.urlsplit(provider.url).port or 0)
        [holder] = connected_to(port, stack.line("worker").dramatiq_workers())
        os.kill(holder, signal.SIGSTOP)
        try:
            assert scalar(tenant, "SELECT status FROM notification_deliveries") == "sending"
            _all_accepted(tenant, 1)
            assert stopped(holder)  # recovered while the lease holder was still frozen
        finally:
            os.kill(holder, signal.SIGCONT)
    [delivery_id] = delivery_ids(tenant)
    # Its answer was lost with the frozen worker: unknown, then resent once, same Message-ID.
    assert uncertain(tenant) == {delivery_id}
    assert copies(ses, tenant) == Counter({delivery_id: 2})
    assert len({m.message_id for m in ses.sent()}) == 1
    assert scalar(tenant, "SELECT count(*) FROM delivery_attempts") == 2


def test_one_crashed_worker_process_is_restarted_and_web_and_clock_stay_up(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    count = _deliveries(tenant, clients=40)
    with FaultySes(ses.endpoint, policy=lambda n: "hold" if n > 40 else "pass") as provider:
        stack = procfile(SES_ENDPOINT_URL=provider.url, **WORKERS).start_all()
        worker, clock = stack.line("worker"), stack.line("clock")
        _every_thread_waiting(provider)
        first = stack.line("worker").dramatiq_workers()
        assert len(first) == PROCESSES
        os.kill(first[0], signal.SIGKILL)  # a segfault, the OOM killer
        provider.policy = lambda n: "pass"
        provider.release()
        wait_until(lambda: "restarting it" in worker.output(), "the worker to say it restarts")
        _all_accepted(tenant, count)
        ticks = clock.output().count("tick enqueued")
        wait_until(lambda: clock.output().count("tick enqueued") > ticks, "the clock to tick again")
        assert worker.running() and clock.running() and stack.web_is_up()
        assert not set(first) & set(worker.dramatiq_workers())  # new worker processes
    assert_each_accepted_once(tenant, ses, delivery_ids(tenant))
