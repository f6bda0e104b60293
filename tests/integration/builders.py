"""Small builders for integration tests: clients and users through the real db functions,
and read-backs of the ledger and deliveries."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from db.people.clients import Client, create_client
from db.people.users import User, create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Plan, Role

PASSWORD = "correct-horse-battery"


def local_instant(zone: str, year: int, month: int, day: int, hour: int, minute: int,
                  fold: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(zone), fold=fold)


def add_client(tenant: Tenant, expires: date, *, name: str = "Client", plan: Plan = Plan.STANDARD,
               zone: str | None = None, users: int = 1) -> tuple[Client, list[User]]:
    with tenant_tx(tenant.slug) as tx:
        client = create_client(tx, name, expires, plan, zone)
        people = [
            create_user(tx, f"user{n}.client{client.id}@example.com", Role.CLIENT_USER, PASSWORD,
                        client_id=client.id)
            for n in range(users)
        ]
    return client, people


def add_admin(tenant: Tenant, email: str = "admin@example.com") -> User:
    with tenant_tx(tenant.slug) as tx:
        return create_user(tx, email, Role.ADMIN, PASSWORD)


def ledger(tenant: Tenant) -> list[dict[str, Any]]:
    with tenant_tx(tenant.slug) as tx, tx.conn.cursor() as cur:
        cur.execute(
            "SELECT subject_id, threshold, due_on, status, local_date, delivered_at "
            "FROM notification_ledger ORDER BY subject_id, threshold"
        )
        names = [d.name for d in cur.description or []]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def claimed(tenant: Tenant) -> set[tuple[int, str]]:
    return {(r["subject_id"], r["threshold"]) for r in ledger(tenant) if r["status"] == "claimed"}


def skipped(tenant: Tenant) -> set[tuple[int, str]]:
    return {(r["subject_id"], r["threshold"]) for r in ledger(tenant) if r["status"] == "skipped"}


def scalar(tenant: Tenant, query: str, *params: object) -> Any:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(query, list(params)).fetchone()
    assert row is not None
    return row[0]


def delivery_statuses(tenant: Tenant) -> dict[str, int]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute(
            "SELECT status, count(*) FROM notification_deliveries GROUP BY status"
        ).fetchall()
    return {str(s): int(str(n)) for s, n in rows}


def days(n: int) -> timedelta:
    return timedelta(days=n)


def run_concurrently(*jobs: Callable[[], object]) -> list[BaseException]:
    """Start every job at the same moment, each in its own thread; return what they raised
    (a deadlock or a unique violation would be here)."""
    barrier = threading.Barrier(len(jobs))
    errors: list[BaseException] = []

    def run(job: Callable[[], object]) -> None:
        try:
            barrier.wait()
            job()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def scan_concurrently(tenant: Tenant, as_of: datetime, scans: int) -> list[BaseException]:
    """Start ``scans`` scans of one tenant and instant at the same moment."""
    from db.notices.scan import run_scan

    return run_concurrently(*[lambda: run_scan(tenant.slug, as_of)] * scans)


def add_clients_in_bulk(tenant: Tenant, count: int, expires: date, users_each: int) -> None:
    """Many clients, each with users who never log in (no password: hashing hundreds of
    passwords would be most of a test's time)."""
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute(
            """
            WITH made AS (
                INSERT INTO clients (name, access_expires_on)
                SELECT 'Client ' || n, %(expires)s FROM generate_series(1, %(count)s) n
                RETURNING id
            )
            INSERT INTO users (email, display_name, role, client_id)
            SELECT 'user' || u || '.client' || m.id || '@example.com', 'User ' || u, 'client_user', m.id
            FROM made m CROSS JOIN generate_series(1, %(users)s) u
            """,
            {"expires": expires, "count": count, "users": users_each},
        )
