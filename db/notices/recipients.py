"""Late binding: who a rule's notice goes to, resolved when the notice is prepared.

The rule names roles, not people ("the case's assignees", "the head of its region"): the
people are looked up here, inside the preparation transaction, so a reassignment, a new
head or a deactivation committed after the rule fired is honoured. Deactivated users are
never recipients; a person named twice (an assignee who is also the region's head) is told
once. A rule's fixed address becomes a contact user (users.role = 'contact'): a row the
inbox and email machinery can address, with no password, that can never sign in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from db.platform.tenancy import TenantTx
from domain.errors import InvalidInput
from domain.people.identity import valid_email

__all__ = ["contact_user", "resolve_recipients"]

# Roles that are also users.role values: holding one means having that role in the portal.
_PORTAL_ROLES = ("admin", "member")


def resolve_recipients(tx: TenantTx, subject_id: int, specs: Iterable[Mapping[str, object]]) -> list[int]:
    """The active users the recipient ``specs`` of a rule action name for this subject,
    now, each once, in id order. An unknown spec is InvalidInput (rules are validated
    on save, so this is a stored rule the code no longer understands)."""
    found: set[int] = set()
    for spec in specs:
        found.update(_resolve(tx, subject_id, spec))
    return sorted(found)


def _text(spec: Mapping[str, object], key: str) -> str:
    value = spec.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"recipient {spec.get('type')!r} needs {key!r}")
    return value.strip()


def _resolve(tx: TenantTx, subject_id: int, spec: Mapping[str, object]) -> list[int]:
    kind = spec.get("type")
    if kind == "assignees":
        rows = tx.conn.execute(
            """
            SELECT u.id FROM subject_assignees a JOIN users u ON u.id = a.user_id
            WHERE a.subject_id = %s AND u.deactivated_at IS NULL
            """,
            [subject_id],
        ).fetchall()
    elif kind == "role":
        role = _text(spec, "role")
        rows = tx.conn.execute(
            """
            SELECT u.id FROM users u
            WHERE u.deactivated_at IS NULL
              AND (u.id IN (SELECT user_id FROM role_holders WHERE role = %(role)s)
                   OR (%(portal_role)s AND u.role = %(role)s))
            """,
            {"role": role, "portal_role": role in _PORTAL_ROLES},
        ).fetchall()
    elif kind == "head":
        rows = tx.conn.execute(
            """
            SELECT u.id FROM subject_hierarchy h
            JOIN hierarchy_units hu ON hu.id = h.unit_id
            JOIN users u ON u.id = hu.head_user_id
            WHERE h.subject_id = %s AND h.level = %s AND u.deactivated_at IS NULL
            """,
            [subject_id, _text(spec, "level")],
        ).fetchall()
    elif kind == "user":
        rows = tx.conn.execute(
            "SELECT id FROM users WHERE lower(email) = %s AND deactivated_at IS NULL",
            [valid_email(_text(spec, "email"))],
        ).fetchall()
    elif kind == "address":
        rows = [(contact,)] if (contact := contact_user(tx, _text(spec, "email"))) else []
    else:
        raise InvalidInput(f"unknown recipient type {kind!r}")
    return [int(str(r[0])) for r in rows]


def contact_user(tx: TenantTx, email: str) -> int | None:
    """The user a fixed address is delivered to: the person with that email if there is one
    (active, or None when deactivated: a deactivation is honoured here too), else a contact
    user created now. ON CONFLICT makes two preparations creating the same contact at once
    end with one row."""
    address = valid_email(email)
    tx.conn.execute(
        """
        INSERT INTO users (email, display_name, role) VALUES (%s, %s, 'contact')
        ON CONFLICT ((lower(email))) DO NOTHING
        """,
        [address, address.split("@")[0]],
    )
    row = tx.conn.execute(
        "SELECT id FROM users WHERE lower(email) = %s AND deactivated_at IS NULL", [address]
    ).fetchone()
    return None if row is None else int(str(row[0]))
