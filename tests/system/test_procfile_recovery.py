"""Faults under the Procfile's processes, and the running system's recovery with no manual
command: Redis flushed, one Dramatiq worker process crashing. (Workers killed, frozen past
their lease, PostgreSQL and Redis restarted: tests/system/test_procfile_never_two.py.)

The fault-injecting endpoint holds the provider's answers after a chosen number of sends,
so each fault lands at a known point of the run (every worker thread waiting on a send SES
already has), not at a moment picked by a timer.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import redis

from db.platform.tenancy import Tenant
from tests.integration.builders import add_clients_in_bulk
from tests.integration.conftest import SesOutbox, wait_until
from tests.support.faulty_ses import FaultySes
from tests.support.procfile_stack import ProcfileStack
from tests.support.rabbitmq import lose_every_message
from tests.system.outcomes import (
    RECOVERY_LIMIT,
    assert_each_accepted_once,
    copies,
    delivery_ids,
    statuses,
)
from tocsin.core.settings import load_settings
from tocsin.messaging.queues import PRODUCT_QUEUES

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
