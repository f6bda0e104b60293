"""Erasing a person (GDPR article 17) while the evidence still verifies.

The chain never holds a personal value in clear (tenant migration 0050: a salted digest, or a
user id), so erasure changes no chained record: it deletes the person's salts, which makes
their digests meaningless, and removes their address and name from every text and JSON column
of the tenant's schema. Chained columns are left alone except the personal ones (their chained
form is the digest, which verify then skips); everything else is rewritten in place.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from db.evidence.audit import record_audit
from db.evidence.verify import SOURCES
from db.platform.tenancy import TenantTx
from domain.errors import InvalidInput, NotFound

__all__ = ["ERASED_MARK", "Erasure", "erase_person"]

ERASED_MARK = "[erased]"
_NOT_SCRUBBED = {"evidence_chain", "evidence_pending", "evidence_head", "evidence_checkpoints",
                 "evidence_verifications", "evidence_salts"}


@dataclass(frozen=True)
class Erasure:
    user_id: int
    columns_changed: int  # (table, column) pairs where a value was rewritten
    rows_changed: int


def _chained_columns(tx: TenantTx) -> dict[str, set[str]]:
    """Columns the chain records as they are (never rewritten: that would break the chain):
    the fields of each chained table's query, and the rule definitions whose digest it holds."""
    found: dict[str, set[str]] = {"rule_versions": {"definition"}}
    for source in SOURCES:
        described = tx.conn.execute(f"SELECT * FROM ({source.query}) s LIMIT 0").description or []
        found.setdefault(source.table, set()).update(c.name for c in described)
        found[source.table] -= set(source.personal)
    return found


def erase_person(tx: TenantTx, email: str) -> Erasure:
    """Erase the user with this address: their address and name, wherever they appear."""
    email = email.strip()
    if "@" not in email:
        raise InvalidInput("give the person's email address")
    row = tx.conn.execute("SELECT id, display_name FROM users WHERE lower(email) = lower(%s)",
                          [email]).fetchone()
    if row is None:
        raise NotFound("nobody with that address in this organisation")
    user_id, name = int(str(row[0])), str(row[1]).strip()
    values = [email] + ([name] if len(name) >= 3 else [])  # a name shorter than that is no name
    tx.conn.execute("DELETE FROM evidence_salts WHERE person = ANY(%s)", [[v.lower() for v in values]])
    pattern = "(" + "|".join(_regex_escape(v) for v in values) + ")"
    # An audit row's before/after is chained as a digest salted per row: the rows whose JSON
    # names the person lose that salt, as the person loses theirs (tenant migration 0055).
    tx.conn.execute(
        "DELETE FROM evidence_salts WHERE person IN (SELECT 'audit_log:' || id FROM audit_log "
        "WHERE before::text ~* %(p)s OR after::text ~* %(p)s)", {"p": pattern})
    tx.conn.execute("DELETE FROM suppressed_addresses WHERE email = lower(%s)", [email])
    tx.conn.execute(
        "UPDATE users SET email = %s, display_name = '', password_hash = NULL, "
        "deactivated_at = coalesce(deactivated_at, now()) WHERE id = %s",
        [f"erased-{user_id}@erased.invalid", user_id])
    chained = _chained_columns(tx)
    # The audit log's rows are rewritten too: the one UPDATE its trigger lets through, for
    # this transaction only (control migration 0041).
    tx.conn.execute("SET LOCAL tocsin.erasure = 'on'")
    columns = tx.conn.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = %s AND data_type IN ('text', 'jsonb', 'character varying') "
        "ORDER BY table_name, ordinal_position", [tx.tenant.schema]).fetchall()
    changed_columns = changed_rows = 0
    for table, column, data_type in columns:
        table, column = str(table), str(column)
        if table in _NOT_SCRUBBED or column in chained.get(table, set()):
            continue
        target = sql.Identifier(column)
        as_text = sql.SQL("{}::text").format(target)
        rewritten = sql.SQL("regexp_replace({}, %(p)s, %(mark)s, 'gi')").format(as_text)
        if data_type == "jsonb":
            rewritten = sql.SQL("({})::jsonb").format(rewritten)
        result = tx.conn.execute(
            sql.SQL("UPDATE {} SET {} = {} WHERE {} ~* %(p)s").format(
                sql.Identifier(table), target, rewritten, as_text),
            {"p": pattern, "mark": ERASED_MARK})
        if result.rowcount:
            changed_columns += 1
            changed_rows += result.rowcount
    tx.conn.execute("SET LOCAL tocsin.erasure = 'off'")
    # Recorded by the user's id only: the row must not bring back what was erased.
    record_audit(tx, "person.erase", "user", user_id,
                 after={"columns_changed": changed_columns, "rows_changed": changed_rows})
    return Erasure(user_id, changed_columns, changed_rows)


def _regex_escape(value: str) -> str:
    return "".join("\\" + c if not c.isalnum() and c not in " _-" else c for c in value)
