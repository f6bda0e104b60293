"""Builders and readers for the time-rule tests: a metrology product, certificates with a
due date in their site's zone, time rules saved through the rules store (db/rules/definitions.py), and
the ledger rows of those rules."""

from __future__ import annotations

import copy
from datetime import date, datetime
from typing import Any

from psycopg.types.json import Jsonb

from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import create_rule, update_rule

PRODUCT = "metrology"
DUE_FIELD = "calibration_due"

TIME_RULE: dict[str, Any] = {
    "name": "Calibration certificate due", "product": PRODUCT, "kind": "time",
    "trigger": {"subject_kind": "certificate",
                "due": {"fact": f"field.{DUE_FIELD}", "offsets": [-30, -7, -1, 0]}},
    "conditions": {"all": [{"fact": "subject.status", "op": "not_equals", "value": "closed"}]},
    "actions": {"channels": ["email", "in_app"], "recipients": [{"type": "assignees"}],
                "template": {"title": "{{ subject.title }} due {{ due.date }}",
                             "body": "Offset {{ due.offset_days }} from {{ due.milestone_date }}."}},
}


def add_metrology(tenant: Tenant) -> None:
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("INSERT INTO products (code, name, subject_kinds) VALUES (%s, 'Metrology', "
                        "'{certificate,instrument}') ON CONFLICT DO NOTHING", [PRODUCT])


def time_rule(**changes: Any) -> dict[str, Any]:
    rule = copy.deepcopy(TIME_RULE)
    for key, value in changes.items():
        rule[key] = value
    return rule


def add_time_rule(tenant: Tenant, definition: dict[str, Any] | None = None) -> int:
    with tenant_tx(tenant.slug) as tx:
        return create_rule(tx, definition or time_rule(), "test").id


def edit_time_rule(tenant: Tenant, rule_id: int, definition: dict[str, Any]) -> int:
    with tenant_tx(tenant.slug) as tx:
        return update_rule(tx, rule_id, definition, "test").version


def add_certificate(tenant: Tenant, external_id: str, due: date | str | None, *,
                    zone: str | None = None, status: str = "open", assignees: tuple[int, ...] = (),
                    kind: str = "certificate", fields: dict[str, Any] | None = None,
                    created_at: datetime | None = None) -> int:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "INSERT INTO subjects (product, kind, external_id, title, status, time_zone, created_at, "
            "status_changed_at) VALUES (%s, %s, %s, %s, %s, %s, coalesce(%s, now()), "
            "coalesce(%s, now())) RETURNING id",
            [PRODUCT, kind, external_id, f"Certificate {external_id}", status, zone, created_at,
             created_at]).fetchone()
        assert row is not None
        subject = int(str(row[0]))
        values = dict(fields or {})
        if due is not None:
            values[DUE_FIELD] = due.isoformat() if isinstance(due, date) else due
        for name, value in values.items():
            tx.conn.execute("INSERT INTO subject_fields VALUES (%s, %s, %s)", [subject, name, Jsonb(value)])
        for user_id in assignees:
            tx.conn.execute("INSERT INTO subject_assignees (subject_id, user_id) VALUES (%s, %s)",
                            [subject, user_id])
    return subject


def move_due(tenant: Tenant, subject_id: int, due: date) -> None:
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE subject_fields SET value = %s WHERE subject_id = %s AND name = %s",
                        [Jsonb(due.isoformat()), subject_id, DUE_FIELD])


def set_status(tenant: Tenant, subject_id: int, status: str, at: datetime) -> None:
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE subjects SET status = %s, status_changed_at = %s WHERE id = %s",
                        [status, at, subject_id])


def rule_ledger(tenant: Tenant) -> list[dict[str, Any]]:
    """Every ledger row of a tenant rule, in key order."""
    with tenant_tx(tenant.slug) as tx, tx.conn.cursor() as cur:
        cur.execute(
            "SELECT id, rule_id, rule_version, subject_id, threshold, due_on, status, status_reason, "
            "local_date, prepared_at FROM notification_ledger WHERE rule_id IS NOT NULL "
            "ORDER BY subject_id, threshold, due_on")
        names = [d.name for d in cur.description or []]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def outcomes(tenant: Tenant) -> set[tuple[int, str, date, str]]:
    """(subject, threshold, due date, status) of every rule ledger row."""
    return {(r["subject_id"], r["threshold"], r["due_on"], r["status"]) for r in rule_ledger(tenant)}


def keys_once(tenant: Tenant) -> bool:
    rows = rule_ledger(tenant)
    keys = [(r["rule_id"], r["subject_id"], r["threshold"], r["due_on"]) for r in rows]
    return len(keys) == len(set(keys))
