"""Builders for the rules tests: products and subjects written with plain SQL (the intake
owns the register's use cases), and a rule definition to vary."""

from __future__ import annotations

import copy
from typing import Any

from psycopg.types.json import Jsonb

from db.platform.tenancy import Tenant, tenant_tx


def add_product(tenant: Tenant, code: str = "fraud", *, subject_kinds: tuple[str, ...] = ("case",),
                trigger_types: tuple[str, ...] | None = None) -> None:
    with tenant_tx(tenant.slug) as tx:
        if trigger_types is None:
            tx.conn.execute("INSERT INTO products (code, name, subject_kinds) VALUES (%s, %s, %s)",
                            [code, code.title(), list(subject_kinds)])
        else:
            tx.conn.execute("INSERT INTO products (code, name, subject_kinds, trigger_types) "
                            "VALUES (%s, %s, %s, %s)",
                            [code, code.title(), list(subject_kinds), list(trigger_types)])


def add_subject(tenant: Tenant, *, product: str = "fraud", kind: str = "case",
                external_id: str = "C-1", fields: dict[str, Any] | None = None,
                forms: dict[str, dict[str, Any]] | None = None,
                hierarchy: dict[str, str] | None = None, assignees: tuple[int, ...] = ()) -> int:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "INSERT INTO subjects (product, kind, external_id, title, status) "
            "VALUES (%s, %s, %s, %s, 'open') RETURNING id",
            [product, kind, external_id, f"Subject {external_id}"]).fetchone()
        assert row is not None
        subject = int(str(row[0]))
        for name, value in (fields or {}).items():
            tx.conn.execute("INSERT INTO subject_fields VALUES (%s, %s, %s)",
                            [subject, name, Jsonb(value)])
        for form, answers in (forms or {}).items():
            for field, value in answers.items():
                tx.conn.execute("INSERT INTO subject_form_answers (subject_id, form, field, value) "
                                "VALUES (%s, %s, %s, %s)", [subject, form, field, Jsonb(value)])
        for level, code in (hierarchy or {}).items():
            tx.conn.execute("INSERT INTO hierarchy_units (level, code, name) VALUES (%s, %s, %s) "
                            "ON CONFLICT DO NOTHING", [level, code, code.title()])
            tx.conn.execute("INSERT INTO subject_hierarchy SELECT %s, level, id FROM hierarchy_units "
                            "WHERE level = %s AND code = %s", [subject, level, code])
        for user_id in assignees:
            tx.conn.execute("INSERT INTO subject_assignees (subject_id, user_id) VALUES (%s, %s)",
                            [subject, user_id])
    return subject


BASE_RULE: dict[str, Any] = {
    "name": "Large case created",
    "product": "fraud",
    "kind": "created",
    "trigger": {"subject_kind": "case"},
    "conditions": {"all": [{"fact": "field.amount", "op": "greater", "value": 1000000}]},
    "filters": {"all": []},
    "actions": {"channels": ["email", "in_app"], "category": "case_alert",
                "recipients": [{"type": "head", "level": "region"}],
                "template": {"title": "Case {{ subject.title }}", "body": "Large amount"}},
}


def rule_json(**changes: Any) -> dict[str, Any]:
    rule = copy.deepcopy(BASE_RULE)
    rule.update(copy.deepcopy(changes))
    return rule


def update_rule_json(name: str, types: list[str], **changes: Any) -> dict[str, Any]:
    return rule_json(**{"name": name, "kind": "updated", "trigger": {"types": types}, **changes})


def no_template_problems(text: str) -> list[str]:
    """The tests' own template checker (the sandbox's check is another module's)."""
    return []
