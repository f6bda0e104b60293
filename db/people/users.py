"""Users of a tenant: creation, lookup and password checks (argon2 hashes only)."""

from __future__ import annotations

import secrets
from contextlib import suppress
from dataclasses import dataclass
from functools import cache

import psycopg
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx
from domain.errors import Conflict, InvalidInput, NotFound
from domain.people.identity import Role, valid_email, valid_name
from domain.people.locales import valid_locale
from tocsin.core import runtime
from tocsin.core.settings import PasswordHashCost

__all__ = [
    "PASSWORD_MAX_LENGTH",
    "PASSWORD_MIN_LENGTH",
    "User",
    "authenticate",
    "create_user",
    "email_language",
    "generate_password",
    "get_user",
    "set_email_language",
    "set_password",
    "spend_a_password_check",
    "valid_password",
]

# A stored hash is verified with the parameters written in it, whatever the cost now.
_LOW_TIME_COST = 1  # passes
_LOW_MEMORY_COST = 1024  # KiB
_LOW_PARALLELISM = 1  # lanes


@cache
def _hasher_for(cost: PasswordHashCost) -> tuple[PasswordHasher, str]:
    """The hasher, and the hash verified against when the email is unknown (so a wrong email
    costs as much as a wrong password)."""
    if cost is PasswordHashCost.LOW:
        hasher = PasswordHasher(time_cost=_LOW_TIME_COST, memory_cost=_LOW_MEMORY_COST,
                                parallelism=_LOW_PARALLELISM)
    else:
        hasher = PasswordHasher()  # argon2-cffi's default: RFC 9106's low-memory profile
    return hasher, hasher.hash(secrets.token_urlsafe(16))


def _hasher() -> PasswordHasher:
    return _hasher_for(runtime.settings().password_hash_cost)[0]


def _dummy_hash() -> str:
    return _hasher_for(runtime.settings().password_hash_cost)[1]


PASSWORD_MIN_LENGTH = 8  # characters
PASSWORD_MAX_LENGTH = 1024  # characters; longer is not a password anyone types


@dataclass(frozen=True)
class User:
    id: int
    email: str
    display_name: str
    role: Role
    client_id: int | None
    active: bool

    @property
    def can_sign_in(self) -> bool:
        """A contact (a rule's fixed address) never signs in, whatever its row holds."""
        return self.role is not Role.CONTACT


_COLUMNS = "id, email, display_name, role, client_id, deactivated_at IS NULL"


def _user(row: tuple[object, ...]) -> User:
    return User(
        int(str(row[0])), str(row[1]), str(row[2]), Role(str(row[3])),
        None if row[4] is None else int(str(row[4])), bool(row[5]),
    )


def valid_password(password: str) -> str:
    if len(password) < PASSWORD_MIN_LENGTH:
        raise InvalidInput(f"password must be at least {PASSWORD_MIN_LENGTH} characters")
    if len(password) > PASSWORD_MAX_LENGTH:
        raise InvalidInput(f"password must be at most {PASSWORD_MAX_LENGTH} characters")
    return password


def create_user(
    tx: TenantTx,
    email: str,
    role: Role,
    password: str,
    client_id: int | None = None,
    display_name: str = "",
) -> User:
    email = valid_email(email)
    valid_password(password)
    if role is Role.CONTACT:
        raise InvalidInput("contacts never sign in: they are made by rules' fixed addresses")
    if role is Role.CLIENT_USER and client_id is None:
        raise InvalidInput("a client_user needs --client ID (the client organisation they belong to)")
    if role is not Role.CLIENT_USER and client_id is not None:
        raise InvalidInput(f"only client_user accounts belong to a client, not {role.value}")
    if client_id is not None:
        exists = tx.conn.execute("SELECT 1 FROM clients WHERE id = %s", [client_id]).fetchone()
        if exists is None:
            raise NotFound(f"no client with id {client_id} in tenant {tx.tenant.slug!r}")
    name = valid_name(display_name, "display name") if display_name.strip() else email.split("@")[0]
    try:
        with tx.conn.transaction():  # a savepoint, so a duplicate leaves the caller's tx usable
            row = tx.conn.execute(
                f"INSERT INTO users (email, display_name, role, client_id, password_hash) "
                f"VALUES (%s, %s, %s, %s, %s) RETURNING {_COLUMNS}",
                [email, name, role.value, client_id, _hasher().hash(password)],
            ).fetchone()
    except psycopg.errors.UniqueViolation:
        raise Conflict(f"a user with email {email!r} exists already") from None
    assert row is not None
    user = _user(row)
    record_audit(tx, "user.create", "user", user.id,
                 after={"email": user.email, "role": user.role, "client_id": client_id})
    return user


def spend_a_password_check(password: str) -> None:
    """Do the work of one failed password check, for callers refusing a sign-in before any
    user is found (an unknown organisation), so timing does not tell what exists."""
    with suppress(VerificationError, InvalidHashError):
        _hasher().verify(_dummy_hash(), password or "-")


def authenticate(tx: TenantTx, email: str, password: str) -> User | None:
    """The active user with this email and password, or None. Constant work either way."""
    row = tx.conn.execute(
        f"SELECT {_COLUMNS}, password_hash FROM users WHERE lower(email) = lower(%s)",
        [email.strip()],
    ).fetchone()
    stored = str(row[6]) if row is not None and row[6] is not None else _dummy_hash()
    try:
        _hasher().verify(stored, password)
    except (VerificationError, InvalidHashError):
        return None
    if row is None:
        return None
    user = _user(row)
    return user if user.active and user.can_sign_in else None


def get_user(tx: TenantTx, user_id: int) -> User | None:
    row = tx.conn.execute(f"SELECT {_COLUMNS} FROM users WHERE id = %s", [user_id]).fetchone()
    return None if row is None else _user(row)


def set_password(tx: TenantTx, user_id: int, password: str) -> User:
    """Give an active user a (new) password; a deactivated or missing user is NotFound."""
    row = tx.conn.execute(
        f"UPDATE users SET password_hash = %s WHERE id = %s AND deactivated_at IS NULL "
        f"AND role <> 'contact' RETURNING {_COLUMNS}",
        [_hasher().hash(valid_password(password)), user_id],
    ).fetchone()
    if row is None:
        raise NotFound(f"no active user {user_id}")
    return _user(row)


def generate_password() -> str:
    return secrets.token_urlsafe(12)


def email_language(tx: TenantTx, user_id: int) -> str | None:
    """The user's own choice of language for their emails; None: their client's or the
    organisation's (domain.people.locales.resolve_locale)."""
    row = tx.conn.execute("SELECT locale FROM users WHERE id = %s", [user_id]).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def set_email_language(tx: TenantTx, user_id: int, locale: str | None) -> None:
    """Choose the language of the user's next emails (None: follow the organisation)."""
    chosen = None if locale is None else valid_locale(locale)
    before = tx.conn.execute("SELECT locale FROM users WHERE id = %s", [user_id]).fetchone()
    tx.conn.execute("UPDATE users SET locale = %s WHERE id = %s", [chosen, user_id])
    record_audit(tx, "preference.language", "user", user_id,
                 before={"locale": None if before is None else before[0]}, after={"locale": chosen})
