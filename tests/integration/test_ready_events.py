"""The wake-up a host's commit sends through PostgreSQL (db/events/ready_events.py): it arrives
only when the host's transaction commits, names the tenant, and a rollback sends none."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

import psycopg
import pytest

from db.events.ready_events import ready_tenants
from db.platform.tenancy import Tenant
from tests.integration.intake_support import case_event, fraud_desk
from tocsin.core.settings import load_settings
from tocsin.shell.outbox import record_event


@pytest.fixture
def heard() -> Iterator[queue.Queue[str]]:
    """The slugs the listener hears, from a listener running as the clock runs it."""
    slugs: queue.Queue[str] = queue.Queue()
    listening = threading.Event()
    stop = threading.Event()
    settings = load_settings()  # the clock's own connection: direct, also behind PgBouncer
    thread = threading.Thread(target=ready_tenants,
                              args=(settings.database_listen_url or settings.database_url, slugs.put, stop),
                              kwargs={"wait_seconds": 0.2, "on_listening": listening.set}, daemon=True)
    thread.start()
    assert listening.wait(30), "the listener never started listening"
    yield slugs
    stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive()


def _host(work: Callable[[psycopg.Connection[tuple[object, ...]]], None]) -> None:
    with psycopg.connect(load_settings().database_url) as conn:
        work(conn)


def test_a_hosts_commit_is_announced_once_it_commits_and_a_rollback_never(
        tenant: Tenant, heard: queue.Queue[str]) -> None:
    fraud_desk(tenant)

    def rolls_back(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        record_event(conn, tenant.slug, case_event("C-1"))
        conn.rollback()

    _host(rolls_back)

    def commits(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        record_event(conn, tenant.slug, case_event("C-2"))
        record_event(conn, tenant.slug, case_event("C-3"))
        assert heard.empty()  # not before the commit
        conn.commit()

    _host(commits)
    assert heard.get(timeout=10) == tenant.slug
    # Two events in one transaction: one announcement; the rolled-back one: none.
    with pytest.raises(queue.Empty):
        heard.get(timeout=1)


def test_each_tenant_is_named_in_its_own_announcement(
        make_tenant: Callable[..., Tenant], heard: queue.Queue[str]) -> None:
    first, second = make_tenant(), make_tenant()
    for t in (first, second):
        fraud_desk(t)

    def both(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        record_event(conn, first.slug, case_event("C-1"))
        conn.commit()
        record_event(conn, second.slug, case_event("C-1"))
        conn.commit()

    _host(both)
    assert sorted([heard.get(timeout=10), heard.get(timeout=10)]) == sorted([first.slug, second.slug])
