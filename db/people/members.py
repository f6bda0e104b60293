"""The tenant's people: listing them, inviting by email, accepting an invitation, changing a
role, deactivating.

An invitee is a user row from the moment of the invitation, without a password, so the
invitation notice is an ordinary inbox row with an email delivery, and deactivating a
person cancels what is still waiting to be sent to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from db.delivery.deliveries import schedule_deliveries
from db.delivery.inbox import add_to_inbox
from db.evidence.audit import current_actor, record_audit
from db.people.users import User, get_user, set_password
from db.platform.tenancy import TenantTx
from domain.audit import Actor
from domain.delivery.states import DELIVERY, NOT_SENT, Status
from domain.errors import Conflict, InvalidInput, NotFound
from domain.people.identity import Role, valid_email, valid_name
from domain.tokens import sign

__all__ = [
    "INVITE_PURPOSE",
    "STAFF_ROLES",
    "Invitation",
    "Member",
    "PendingInvitation",
    "accept_invitation",
    "deactivate",
    "get_invitation",
    "invite_member",
    "list_members",
    "set_role",
]

INVITE_PURPOSE = "invite"
STAFF_ROLES = (Role.ADMIN, Role.MEMBER)


@dataclass(frozen=True)
class Member:
    id: int
    email: str
    display_name: str
    role: Role
    client_name: str | None
    active: bool
    invited: bool  # invited, and has not accepted yet
    created_at: datetime


@dataclass(frozen=True)
class Invitation:
    id: int
    user_id: int
    token: str
    delivery_ids: list[int]  # the invitation email, sent once the transaction commits


def list_members(tx: TenantTx) -> list[Member]:
    rows = tx.conn.execute(
        """
        SELECT u.id, u.email, u.display_name, u.role, c.name, u.deactivated_at IS NULL,
               u.password_hash IS NULL, u.created_at
        FROM users u LEFT JOIN clients c ON c.id = u.client_id
        WHERE u.role <> 'contact'  -- rules' fixed addresses are not members
        ORDER BY u.deactivated_at IS NOT NULL, u.role, lower(u.email)
        """
    ).fetchall()
    return [
        Member(int(str(r[0])), str(r[1]), str(r[2]), Role(str(r[3])),
               None if r[4] is None else str(r[4]), bool(r[5]), bool(r[6]), r[7])  # type: ignore[arg-type]
        for r in rows
    ]


def invite_member(
    tx: TenantTx,
    email: str,
    role: Role,
    invited_by: int,
    *,
    key: bytes,
    expires_at: datetime,
    client_id: int | None = None,
    display_name: str = "",
) -> Invitation:
    """Invite someone by email: their user row (no password yet), an invitation whose signed
    link works once and until ``expires_at``, and a member_invite notice with its email.
    Inviting a pending invitee again replaces their link; inviting a member is a Conflict."""
    email = valid_email(email)
    name = valid_name(display_name, "name") if display_name.strip() else email.split("@")[0]
    if role is Role.CONTACT:
        raise InvalidInput("contacts are not invited: they only receive rules' emails")
    if (role is Role.CLIENT_USER) != (client_id is not None):
        raise InvalidInput("choose the client organisation for a client user, and only for one")
    if client_id is not None and tx.conn.execute(
        "SELECT 1 FROM clients WHERE id = %s", [client_id]
    ).fetchone() is None:
        raise NotFound(f"no client with id {client_id}")
    existing = tx.conn.execute(
        "SELECT id, password_hash IS NULL AND deactivated_at IS NULL FROM users "
        "WHERE lower(email) = %s FOR UPDATE",
        [email],
    ).fetchone()
    if existing is not None and not existing[1]:
        raise Conflict(f"{email} already has an account here")
    # A contact (a rule's fixed address, no password) invited as a person becomes that
    # person: the row takes the invited role, and its past notices stay with it.
    try:
        with tx.conn.transaction():
            row = tx.conn.execute(
                """
                INSERT INTO users (email, display_name, role, client_id) VALUES (%s, %s, %s, %s)
                ON CONFLICT ((lower(email))) DO UPDATE
                    SET display_name = EXCLUDED.display_name, role = EXCLUDED.role,
                        client_id = EXCLUDED.client_id
                RETURNING id
                """,
                [email, name, role.value, client_id],
            ).fetchone()
    except psycopg.errors.CheckViolation:
        raise InvalidInput("only client users belong to a client organisation") from None
    assert row is not None
    user_id = int(str(row[0]))
    tx.conn.execute(
        "UPDATE invitations SET revoked_at = now() "
        "WHERE user_id = %s AND accepted_at IS NULL AND revoked_at IS NULL",
        [user_id],
    )
    row = tx.conn.execute(
        "INSERT INTO invitations (user_id, invited_by, expires_at) VALUES (%s, %s, %s) RETURNING id",
        [user_id, invited_by, expires_at],
    ).fetchone()
    assert row is not None
    invitation_id = int(str(row[0]))
    token = sign(key, INVITE_PURPOSE, {"tenant": tx.tenant.slug, "invitation": invitation_id},
                 expires_at)
    inviter = get_user(tx, invited_by)
    by = inviter.display_name if inviter is not None else "An administrator"
    item = add_to_inbox(
        tx, user_id, "member_invite", f"You are invited to {tx.tenant.name} on Tocsin",
        f"{by} has invited you to join {tx.tenant.name}. Open the link to choose a password; "
        "it works once and expires in a few days.",
        {"href": f"/invitations/{token}", "inviter": by}, idempotency_key=f"invitation:{invitation_id}",
    )
    assert item is not None  # a fresh invitation id is a fresh key
    delivery = tx.conn.execute(
        "INSERT INTO notification_deliveries (notification_id, channel) VALUES (%s, 'email') "
        "RETURNING id",
        [item.id],
    ).fetchone()
    assert delivery is not None
    delivery_ids = [int(str(delivery[0]))]
    schedule_deliveries(tx, delivery_ids)  # handed to the workers once tx commits
    record_audit(tx, "member.invite", "user", user_id,
                 after={"email": email, "role": role, "client_id": client_id, "invitation": invitation_id})
    return Invitation(invitation_id, user_id, token, delivery_ids)


@dataclass(frozen=True)
class PendingInvitation:
    id: int
    email: str
    usable: bool  # not accepted, not replaced, not expired


def get_invitation(tx: TenantTx, invitation_id: int) -> PendingInvitation:
    row = tx.conn.execute(
        """
        SELECT i.id, u.email,
               i.accepted_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > now()
               AND u.deactivated_at IS NULL
        FROM invitations i JOIN users u ON u.id = i.user_id WHERE i.id = %s
        """,
        [invitation_id],
    ).fetchone()
    if row is None:
        raise NotFound(f"no invitation {invitation_id}")
    return PendingInvitation(int(str(row[0])), str(row[1]), bool(row[2]))


def accept_invitation(tx: TenantTx, invitation_id: int, password: str) -> User:
    """Use the invitation, once: the guarded UPDATE lets exactly one acceptance through (a
    second click, a second tab, a replayed link find it used) and sets the password."""
    row = tx.conn.execute(
        """
        UPDATE invitations SET accepted_at = now()
        WHERE id = %s AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > now()
        RETURNING user_id
        """,
        [invitation_id],
    ).fetchone()
    if row is None:
        raise InvalidInput("this invitation has been used already or has expired; ask for a new one")
    try:
        user = set_password(tx, int(str(row[0])), password)
    except NotFound:
        raise InvalidInput("this invitation is no longer valid; ask your administrator") from None
    record_audit(tx, "member.join", "user", user.id, after={"invitation": invitation_id},
                 actor=Actor.user(user.id, user.email, current_actor().address))
    return user


def _other_person(tx: TenantTx, actor_id: int, user_id: int) -> User:
    if actor_id == user_id:
        raise InvalidInput("you cannot change your own account here; ask another administrator")
    user = get_user(tx, user_id)
    if user is None:
        raise NotFound(f"no user {user_id}")
    return user


def set_role(tx: TenantTx, actor_id: int, user_id: int, role: Role) -> User:
    """Move a team member between administrator and member; client users stay client users."""
    user = _other_person(tx, actor_id, user_id)
    if role not in STAFF_ROLES or user.role not in STAFF_ROLES:
        raise InvalidInput("only team members can be made administrators or members")
    tx.conn.execute("UPDATE users SET role = %s WHERE id = %s", [role.value, user_id])
    changed = get_user(tx, user_id)
    assert changed is not None
    record_audit(tx, "member.role", "user", user_id, before={"role": user.role},
                 after={"role": changed.role})
    return changed


# What a deactivation cancels: the person's emails not sent yet (DELIVERY's guard).
_UNSENT_CANCELLED = DELIVERY.where(to=Status.CANCELLED, from_=NOT_SENT, alias="d")


def deactivate(tx: TenantTx, actor_id: int, user_id: int) -> User:
    """Deactivate someone: they cannot sign in (their sessions end at their next request), an
    open invitation stops working, and nothing still waiting to be sent reaches them."""
    person = _other_person(tx, actor_id, user_id)
    tx.conn.execute(
        "UPDATE users SET deactivated_at = coalesce(deactivated_at, now()) WHERE id = %s", [user_id]
    )
    tx.conn.execute(
        "UPDATE invitations SET revoked_at = now() "
        "WHERE user_id = %s AND accepted_at IS NULL AND revoked_at IS NULL",
        [user_id],
    )
    tx.conn.execute(
        f"""
        UPDATE notification_deliveries d
        SET status = 'cancelled', status_reason = 'recipient deactivated', updated_at = now()
        FROM notifications n
        WHERE d.notification_id = n.id AND n.recipient_user_id = %s AND {_UNSENT_CANCELLED}
        """,
        [user_id],
    )
    user = get_user(tx, user_id)
    assert user is not None
    record_audit(tx, "member.deactivate", "user", user_id,
                 before={"email": person.email, "active": person.active}, after={"active": False})
    return user
