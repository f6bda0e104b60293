"""Client organisations and their licence events."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from db.delivery.deliveries import schedule_deliveries
from db.evidence.audit import current_actor, record_audit
from db.notices.fanout import notify_claims
from db.platform.tenancy import TenantTx
from domain.delivery.states import DELIVERY, NOT_SENT, Status
from domain.errors import NotFound
from domain.notices.claims import CLAIM, ClaimStatus
from domain.notices.licence import LICENCE, RENEWED, RULE, SUBJECT_KIND, LicenceStatus, check_client_renewal
from domain.people.contacts import NO_CONTACTS, Contacts
from domain.people.identity import Plan, valid_name, valid_zone

__all__ = [
    "CLIENT_COLUMNS",
    "RENEWAL_TERM_SQL",
    "Client",
    "Renewal",
    "cancel_waiting_reminders",
    "client_from_row",
    "client_values",
    "create_client",
    "get_client",
    "license_events",
    "list_clients",
    "renew_licence",
]


@dataclass(frozen=True)
class Client:
    id: int
    name: str
    plan: str
    status: str
    access_expires_on: date
    time_zone: str | None
    version: int = 1  # every edit names the version it was based on (db/people/client_admin.py)
    archived: bool = False
    contact_name: str = ""
    contact_email: str = ""
    contact_phone: str = ""
    updated_by: str | None = None
    updated_at: datetime | None = None
    locale: str | None = None  # the default language of its users (None: the tenant's)


_COLUMNS = ("id, name, plan, status, access_expires_on, time_zone, version, archived_at IS NOT NULL, "
            "contact_name, contact_email, contact_phone, updated_by, updated_at, locale")


CLIENT_COLUMNS = _COLUMNS  # for the client administration's own statements


def _client(row: tuple[object, ...]) -> Client:
    expires, updated = row[4], row[12]
    assert isinstance(expires, date) and isinstance(updated, datetime)
    return Client(
        int(str(row[0])), str(row[1]), str(row[2]), str(row[3]), expires,
        None if row[5] is None else str(row[5]), int(str(row[6])), bool(row[7]), str(row[8]),
        str(row[9]), str(row[10]), None if row[11] is None else str(row[11]), updated,
        None if row[13] is None else str(row[13]),
    )


def create_client(
    tx: TenantTx,
    name: str,
    access_expires_on: date,
    plan: Plan = Plan.STANDARD,
    time_zone: str | None = None,
    actor: str = "cli",
    contacts: Contacts = NO_CONTACTS,
) -> Client:
    name = valid_name(name, "client name")
    if time_zone is not None:
        valid_zone(time_zone)
    row = tx.conn.execute(
        f"""
        WITH created AS (
            INSERT INTO clients (name, plan, access_expires_on, time_zone, contact_name,
                                 contact_email, contact_phone, updated_by)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}
        ), event AS (
            INSERT INTO license_events (client_id, event, access_expires_on, actor)
            SELECT id, 'created', access_expires_on, %s FROM created
        )
        SELECT * FROM created
        """,
        [name, plan.value, access_expires_on, time_zone, contacts.name, contacts.email,
         contacts.phone, current_actor().label, actor],
    ).fetchone()
    assert row is not None
    client = _client(row)
    record_audit(tx, "client.create", "client", client.id, after=client_values(client))
    return client


client_from_row = _client


def client_values(client: Client) -> dict[str, object]:
    """A client as the audit log records it before and after a change."""
    return {"name": client.name, "plan": client.plan, "status": client.status,
            "access_expires_on": client.access_expires_on, "time_zone": client.time_zone,
            "archived": client.archived, "contact_name": client.contact_name,
            "contact_email": client.contact_email, "contact_phone": client.contact_phone,
            "locale": client.locale}


def get_client(tx: TenantTx, client_id: int) -> Client:
    row = tx.conn.execute(f"SELECT {_COLUMNS} FROM clients WHERE id = %s", [client_id]).fetchone()
    if row is None:
        raise NotFound(f"no client with id {client_id} in tenant {tx.tenant.slug!r}")
    return _client(row)


def list_clients(tx: TenantTx, *, archived: bool = False) -> list[Client]:
    """The clients in use (``archived``: the archived ones instead)."""
    rows = tx.conn.execute(
        f"SELECT {_COLUMNS} FROM clients WHERE (archived_at IS NOT NULL) = %s ORDER BY name, id",
        [archived]).fetchall()
    return [_client(r) for r in rows]


def license_events(tx: TenantTx, client_id: int) -> list[tuple[str, date, str | None, str]]:
    rows = tx.conn.execute(
        "SELECT event, access_expires_on, threshold, actor FROM license_events "
        "WHERE client_id = %s ORDER BY occurred_at, id",
        [client_id],
    ).fetchall()
    return [(str(r[0]), r[1], None if r[2] is None else str(r[2]), str(r[3])) for r in rows]  # type: ignore[misc]


RENEWAL_TERM_SQL = "interval '1 year'"

# The status guards of a renewal's UPDATEs, from the domain's machines: any licence may be
# renewed (LICENCE); reminders and claims for the old date not sent yet are cancelled.
_RENEWED = LICENCE.where(to=LicenceStatus.ACTIVE)
_UNSENT_CANCELLED = DELIVERY.where(to=Status.CANCELLED, from_=NOT_SENT, alias="d")
_CLAIM_CANCELLED = CLAIM.where(to=ClaimStatus.CANCELLED, alias="l")


@dataclass(frozen=True)
class Renewal:
    client: Client
    previous_status: str
    delivery_ids: list[int]  # the renewal notice's emails, sent once the transaction commits


def renew_licence(
    tx: TenantTx,
    client_id: int,
    today: date,
    actor: str,
    actor_user_id: int | None = None,
    *,
    expected_expires_on: date | None = None,
    by_client_user: bool = False,
) -> Renewal | None:
    """Extend access one year past the later of the current expiry and ``today`` (the
    client's local date) and make the client active.

    The guard is the expiry date the person was looking at (``expected_expires_on``): a
    double click, a second tab or a concurrent admin finds the date already moved, changes
    nothing and gets None. A new due date means new ledger keys, so the next cycle's
    reminders are claimed afresh; reminders still waiting for the old date are cancelled,
    and the renewal notice is claimed once under (licence, client, renewed, new date).

    ``by_client_user``: the licence rules for a client user renewing their own licence
    (domain.notices.licence.check_client_renewal) are checked under the row lock, before anything is
    written; a refusal raises RenewalRefused and leaves no trace.
    """
    before = tx.conn.execute(
        f"SELECT {_COLUMNS} FROM clients WHERE id = %s FOR UPDATE", [client_id]
    ).fetchone()
    if before is None:
        raise NotFound(f"no client with id {client_id} in tenant {tx.tenant.slug!r}")
    old = _client(before)
    if expected_expires_on is not None and old.access_expires_on != expected_expires_on:
        return None  # a double click or a second tab: the first renewal has moved the date
    if by_client_user:
        check_client_renewal(old.status, old.access_expires_on, today)
    row = tx.conn.execute(
        f"""
        UPDATE clients
        SET status = 'active', updated_at = now(), version = version + 1,
            updated_by = %(by)s,
            access_expires_on = (greatest(access_expires_on, %(today)s) + {RENEWAL_TERM_SQL})::date
        WHERE id = %(id)s AND access_expires_on = coalesce(%(expected)s, access_expires_on)
          AND {_RENEWED}
        RETURNING {_COLUMNS}
        """,
        {"id": client_id, "today": today, "expected": expected_expires_on,
         "by": current_actor().label},
    ).fetchone()
    if row is None:
        return None
    renewed = _client(row)
    event = "reactivated" if old.status == "closed" else "renewed"
    tx.conn.execute(
        "INSERT INTO license_events (client_id, event, access_expires_on, actor, actor_user_id) "
        "VALUES (%s, %s, %s, %s, %s)",
        [client_id, event, renewed.access_expires_on, actor, actor_user_id],
    )
    cancel_waiting_reminders(tx, client_id, old.access_expires_on)
    record_audit(tx, f"licence.{event}", "client", client_id, before=client_values(old),
                 after=client_values(renewed))
    delivery_ids = _claim_renewal_notice(tx, renewed, today)
    schedule_deliveries(tx, delivery_ids)  # handed to the workers once tx commits
    return Renewal(renewed, old.status, delivery_ids)


def cancel_waiting_reminders(tx: TenantTx, client_id: int, old_due_on: date,
                             reason: str = "licence renewed before delivery") -> None:
    """Reminders for the old date that nobody has sent yet are cancelled, and so are their
    claims once no delivery of theirs is left in flight or sent."""
    params = {"rule": RULE, "kind": SUBJECT_KIND, "client": client_id, "due": old_due_on,
              "renewed": RENEWED, "reason": reason}
    tx.conn.execute(
        f"""
        UPDATE notification_deliveries d
        SET status = 'cancelled', status_reason = %(reason)s,
            updated_at = now()
        FROM notifications n
        JOIN notification_ledger l ON l.id = n.ledger_id
        WHERE d.notification_id = n.id AND {_UNSENT_CANCELLED}
          AND l.rule = %(rule)s AND l.subject_kind = %(kind)s AND l.subject_id = %(client)s
          AND l.due_on = %(due)s AND l.threshold <> %(renewed)s
        """,
        params,
    )
    tx.conn.execute(
        f"""
        UPDATE notification_ledger l
        SET status = 'cancelled', status_reason = %(reason)s,
            cancelled_at = now()
        WHERE l.rule = %(rule)s AND l.subject_kind = %(kind)s AND l.subject_id = %(client)s
          AND l.due_on = %(due)s AND l.threshold <> %(renewed)s
          AND {_CLAIM_CANCELLED} AND l.delivered_at IS NULL
          AND NOT EXISTS (
              SELECT 1 FROM notifications n JOIN notification_deliveries d ON d.notification_id = n.id
              WHERE n.ledger_id = l.id AND d.status <> 'cancelled'
          )
        """,
        params,
    )


def _claim_renewal_notice(tx: TenantTx, client: Client, today: date) -> list[int]:
    row = tx.conn.execute(
        """
        INSERT INTO notification_ledger
            (rule, subject_kind, subject_id, threshold, due_on, status, local_date, prepared_at)
        VALUES (%s, %s, %s, %s, %s, 'claimed', %s, now())
        ON CONFLICT ON CONSTRAINT notification_once DO NOTHING
        RETURNING id
        """,
        [RULE, SUBJECT_KIND, client.id, RENEWED, client.access_expires_on, today],
    ).fetchone()
    if row is None:
        return []
    ledger_id = int(str(row[0]))
    notify_claims(tx, [ledger_id])
    rows = tx.conn.execute(
        "SELECT d.id FROM notification_deliveries d JOIN notifications n ON n.id = d.notification_id "
        "WHERE n.ledger_id = %s ORDER BY d.id",
        [ledger_id],
    ).fetchall()
    return [int(str(r[0])) for r in rows]
