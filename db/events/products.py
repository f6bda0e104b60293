"""Products (host applications) registered in a tenant, with their vocabulary, and the
tenant's hierarchy units (departments, regions, ...) subjects are placed in."""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg

from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx
from domain.errors import Conflict, InvalidInput, NotFound
from domain.events.intake import CODE, TRIGGER
from domain.people.identity import valid_email, valid_name

__all__ = ["DEFAULT_TRIGGERS", "Product", "Unit", "add_unit", "create_product", "list_products"]

DEFAULT_TRIGGERS = ("field_changed", "status_changed", "assigned", "form_submitted", "message_posted")


@dataclass(frozen=True)
class Product:
    code: str
    name: str
    subject_kinds: tuple[str, ...]  # empty: any kind
    trigger_types: tuple[str, ...]


def _code(text: str, what: str, pattern: re.Pattern[str] = CODE) -> str:
    if not pattern.fullmatch(text):
        raise InvalidInput(f"{what} {text!r} must be lower-case letters, digits and _, starting "
                           f"with a letter (pattern {pattern.pattern})")
    return text


def create_product(tx: TenantTx, code: str, name: str, kinds: tuple[str, ...] = (),
                   triggers: tuple[str, ...] = DEFAULT_TRIGGERS) -> Product:
    code, name = _code(code, "product code"), valid_name(name, "product name")
    kinds = tuple(_code(k, "subject kind") for k in kinds)
    triggers = tuple(_code(t, "trigger type", TRIGGER) for t in triggers)
    row = tx.conn.execute(
        "INSERT INTO products (code, name, subject_kinds, trigger_types) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT DO NOTHING RETURNING code", [code, name, list(kinds), list(triggers)]).fetchone()
    if row is None:
        raise Conflict(f"product {code!r} exists already")
    record_audit(tx, "product.create", "product", code,
                 after={"name": name, "subject_kinds": kinds, "trigger_types": triggers})
    return Product(code, name, kinds, triggers)


def list_products(tx: TenantTx) -> list[Product]:
    rows = tx.conn.execute(
        "SELECT code, name, subject_kinds, trigger_types FROM products ORDER BY code").fetchall()
    return [Product(str(r[0]), str(r[1]), tuple(r[2]), tuple(r[3])) for r in rows]  # type: ignore[arg-type]


@dataclass(frozen=True)
class Unit:
    id: int
    level: str
    code: str
    name: str
    head_email: str | None


def add_unit(tx: TenantTx, level: str, code: str, name: str, head_email: str | None = None) -> Unit:
    """A unit of the tenant's hierarchy (e.g. region north), with its head: a user of the
    tenant, named by email."""
    level, name = _code(level, "hierarchy level"), valid_name(name, "unit name")
    code = valid_name(code, "unit code")
    head_id = None
    if head_email is not None:
        email = valid_email(head_email)
        row = tx.conn.execute("SELECT id FROM users WHERE lower(email) = %s AND deactivated_at IS NULL",
                              [email]).fetchone()
        if row is None:
            raise NotFound(f"no active user {email!r} in this tenant to head the unit")
        head_id = int(str(row[0]))
        head_email = email
    try:
        with tx.conn.transaction():
            row = tx.conn.execute(
                "INSERT INTO hierarchy_units (level, code, name, head_user_id) VALUES (%s, %s, %s, %s) "
                "RETURNING id", [level, code, name, head_id]).fetchone()
    except psycopg.errors.UniqueViolation:
        raise Conflict(f"the {level} unit {code!r} exists already") from None
    assert row is not None
    record_audit(tx, "hierarchy.add", "hierarchy_unit", row[0],
                 after={"level": level, "code": code, "name": name, "head": head_email})
    return Unit(int(str(row[0])), level, code, name, head_email)
