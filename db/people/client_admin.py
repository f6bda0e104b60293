"""Administering a client organisation from the portal: editing its details, correcting its
licence date (with a reason), archiving and restoring it.

Every change names the version of the client it was based on: an edit made from a page that
someone else has changed since is refused with StaleEdit, which says who changed it, when,
and carries the current values, so the form can show them. Each change is recorded in the
audit log with the values before and after, in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from db.evidence.audit import current_actor, record_audit
from db.people.clients import (
    CLIENT_COLUMNS as _COLUMNS,
)
from db.people.clients import (
    Client,
    cancel_waiting_reminders,
    client_values,
    get_client,
)
from db.people.clients import client_from_row as _client
from db.platform.tenancy import TenantTx
from domain.errors import Conflict, InvalidInput, NotFound
from domain.notices.licence import LICENCE, LicenceStatus
from domain.people.contacts import Contacts
from domain.people.identity import Plan, valid_name, valid_zone
from domain.people.locales import valid_locale

__all__ = [
    "REASON_MAX_LENGTH",
    "ClientDetails",
    "ClientUser",
    "StaleEdit",
    "archive_client",
    "client_user_of",
    "client_users",
    "correct_expiry",
    "edit_client",
    "restore_client",
]

REASON_MAX_LENGTH = 500  # characters of a correction's reason


class StaleEdit(Conflict):
    """The client changed since the page was loaded: nothing was written."""

    def __init__(self, current: Client):
        when = current.updated_at.strftime("%Y-%m-%d %H:%M UTC") if current.updated_at else "just now"
        super().__init__(f"changed by {current.updated_by or 'someone else'} at {when}: "
                         "here are the current values; make your change again")
        self.current = current


@dataclass(frozen=True)
class ClientDetails:
    name: str
    plan: Plan
    time_zone: str | None
    contacts: Contacts
    locale: str | None = None  # its users' default language (None: the tenant's)


def _locked(tx: TenantTx, client_id: int, expected_version: int) -> Client:
    row = tx.conn.execute(f"SELECT {_COLUMNS} FROM clients WHERE id = %s FOR UPDATE",
                          [client_id]).fetchone()
    if row is None:
        get_client(tx, client_id)  # raises NotFound
    assert row is not None
    client = _client(row)
    if client.version != expected_version:
        raise StaleEdit(client)
    return client


def _update(tx: TenantTx, client_id: int, assignments: str, params: list[object],
            guard: str = "true") -> Client:
    row = tx.conn.execute(
        f"UPDATE clients SET {assignments}, version = version + 1, updated_at = now(), "
        f"updated_by = %s WHERE id = %s AND {guard} RETURNING {_COLUMNS}",
        [*params, current_actor().label, client_id]).fetchone()
    assert row is not None
    return _client(row)


def edit_client(tx: TenantTx, client_id: int, expected_version: int, details: ClientDetails) -> Client:
    """Name, plan, time zone, default language and contact; unchanged values change nothing
    (no new version)."""
    name = valid_name(details.name, "client name")
    zone = valid_zone(details.time_zone) if details.time_zone else None
    locale = valid_locale(details.locale) if details.locale else None
    before = _locked(tx, client_id, expected_version)
    c = details.contacts
    if (name, details.plan.value, zone, c.name, c.email, c.phone, locale) == (
            before.name, before.plan, before.time_zone, before.contact_name, before.contact_email,
            before.contact_phone, before.locale):
        return before
    after = _update(tx, client_id, "name = %s, plan = %s, time_zone = %s, contact_name = %s, "
                    "contact_email = %s, contact_phone = %s, locale = %s",
                    [name, details.plan.value, zone, c.name, c.email, c.phone, locale])
    record_audit(tx, "client.edit", "client", client_id, before=client_values(before),
                 after=client_values(after))
    return after


_REACTIVATED = LICENCE.where(to=LicenceStatus.ACTIVE)


def correct_expiry(tx: TenantTx, client_id: int, expected_version: int, new_date: date,
                   reason: str, today: date) -> Client:
    """Set or correct the licence's expiry date, with the reason (kept in the licence event
    and the audit log). Reminders still waiting for the old date are cancelled, as a renewal
    cancels them; a date moved past ``today`` (the client's local date) makes an expired or
    closed licence active again, and one moved into the past is expired by the next scan."""
    reason = " ".join(reason.split())
    if not reason:
        raise InvalidInput("say why the date changes: the reason is kept with the licence's history")
    if len(reason) > REASON_MAX_LENGTH:
        raise InvalidInput(f"the reason: at most {REASON_MAX_LENGTH} characters")
    before = _locked(tx, client_id, expected_version)
    if new_date == before.access_expires_on:
        raise InvalidInput("that is the current expiry date already")
    if before.status != LicenceStatus.ACTIVE.value and new_date > today:
        after = _update(tx, client_id, "access_expires_on = %s, status = 'active'", [new_date],
                        _REACTIVATED)
    else:
        after = _update(tx, client_id, "access_expires_on = %s", [new_date])
    tx.conn.execute(
        "INSERT INTO license_events (client_id, event, access_expires_on, actor, actor_user_id, reason) "
        "VALUES (%s, 'corrected', %s, %s, %s, %s)",
        [client_id, new_date, current_actor().label, current_actor().user_id, reason])
    cancel_waiting_reminders(tx, client_id, before.access_expires_on,
                             reason="licence date corrected before delivery")
    record_audit(tx, "licence.corrected", "client", client_id,
                 before={"access_expires_on": before.access_expires_on, "status": before.status},
                 after={"access_expires_on": after.access_expires_on, "status": after.status,
                        "reason": reason})
    return after


def archive_client(tx: TenantTx, client_id: int, expected_version: int) -> Client:
    """Out of the list and the licence scan until restored; waiting reminders cancelled."""
    before = _locked(tx, client_id, expected_version)
    if before.archived:
        return before
    after = _update(tx, client_id, "archived_at = now()", [])
    tx.conn.execute(
        "INSERT INTO license_events (client_id, event, access_expires_on, actor, actor_user_id) "
        "VALUES (%s, 'archived', %s, %s, %s)",
        [client_id, after.access_expires_on, current_actor().label, current_actor().user_id])
    cancel_waiting_reminders(tx, client_id, before.access_expires_on,
                             reason="client archived before delivery")
    record_audit(tx, "client.archive", "client", client_id, before={"archived": False},
                 after={"archived": True})
    return after


def restore_client(tx: TenantTx, client_id: int, expected_version: int) -> Client:
    before = _locked(tx, client_id, expected_version)
    if not before.archived:
        return before
    after = _update(tx, client_id, "archived_at = NULL", [])
    tx.conn.execute(
        "INSERT INTO license_events (client_id, event, access_expires_on, actor, actor_user_id) "
        "VALUES (%s, 'restored', %s, %s, %s)",
        [client_id, after.access_expires_on, current_actor().label, current_actor().user_id])
    record_audit(tx, "client.restore", "client", client_id, before={"archived": True},
                 after={"archived": False})
    return after


@dataclass(frozen=True)
class ClientUser:
    id: int
    email: str
    display_name: str
    active: bool
    invited: bool  # invited, has not accepted yet


def client_users(tx: TenantTx, client_id: int) -> list[ClientUser]:
    rows = tx.conn.execute(
        "SELECT id, email, display_name, deactivated_at IS NULL, password_hash IS NULL FROM users "
        "WHERE client_id = %s ORDER BY deactivated_at IS NOT NULL, lower(email)", [client_id]).fetchall()
    return [ClientUser(int(str(r[0])), str(r[1]), str(r[2]), bool(r[3]), bool(r[4])) for r in rows]


def client_user_of(tx: TenantTx, client_id: int, user_id: int) -> ClientUser:
    """One of this client's users; NotFound for anyone else (another client's, staff)."""
    for user in client_users(tx, client_id):
        if user.id == user_id:
            return user
    raise NotFound(f"client {client_id} has no user {user_id}")
