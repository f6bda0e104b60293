"""Client organisations and their licence events."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from db.tenancy import TenantTx
from domain.errors import NotFound
from domain.identity import Plan, valid_name, valid_zone


@dataclass(frozen=True)
class Client:
    id: int
    name: str
    plan: str
    status: str
    access_expires_on: date
    time_zone: str | None


_COLUMNS = "id, name, plan, status, access_expires_on, time_zone"


def _client(row: tuple[object, ...]) -> Client:
    expires = row[4]
    assert isinstance(expires, date)
    return Client(
        int(str(row[0])), str(row[1]), str(row[2]), str(row[3]), expires,
        None if row[5] is None else str(row[5]),
    )


def create_client(
    tx: TenantTx,
    name: str,
    access_expires_on: date,
    plan: Plan = Plan.STANDARD,
    time_zone: str | None = None,
    actor: str = "cli",
) -> Client:
    name = valid_name(name, "client name")
    if time_zone is not None:
        valid_zone(time_zone)
    row = tx.conn.execute(
        f"""
        WITH created AS (
            INSERT INTO clients (name, plan, access_expires_on, time_zone)
            VALUES (%s, %s, %s, %s) RETURNING {_COLUMNS}
        ), event AS (
            INSERT INTO license_events (client_id, event, access_expires_on, actor)
            SELECT id, 'created', access_expires_on, %s FROM created
        )
        SELECT {_COLUMNS} FROM created
        """,
        [name, plan.value, access_expires_on, time_zone, actor],
    ).fetchone()
    assert row is not None
    return _client(row)


def get_client(tx: TenantTx, client_id: int) -> Client:
    row = tx.conn.execute(f"SELECT {_COLUMNS} FROM clients WHERE id = %s", [client_id]).fetchone()
    if row is None:
        raise NotFound(f"no client with id {client_id} in tenant {tx.tenant.slug!r}")
    return _client(row)


def list_clients(tx: TenantTx) -> list[Client]:
    rows = tx.conn.execute(f"SELECT {_COLUMNS} FROM clients ORDER BY name, id").fetchall()
    return [_client(r) for r in rows]


def license_events(tx: TenantTx, client_id: int) -> list[tuple[str, date, str | None, str]]:
    rows = tx.conn.execute(
        "SELECT event, access_expires_on, threshold, actor FROM license_events "
        "WHERE client_id = %s ORDER BY occurred_at, id",
        [client_id],
    ).fetchall()
    return [(str(r[0]), r[1], None if r[2] is None else str(r[2]), str(r[3])) for r in rows]  # type: ignore[misc]
