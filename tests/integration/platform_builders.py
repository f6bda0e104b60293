"""Small builders for the platform half, in plain SQL (the intake's and rules' own APIs are
built on other branches): a product, a subject with facts and assignees, hierarchy units,
a rule with its version, an event, and the ledger claim a firing rule leaves."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from tests.integration.builders import PASSWORD


def add_person(tenant: Tenant, email: str, role: Role = Role.MEMBER) -> int:
    with tenant_tx(tenant.slug) as tx:
        return create_user(tx, email, role, PASSWORD).id


def add_product(tenant: Tenant, code: str = "fraud") -> str:
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("INSERT INTO products (code, name, subject_kinds) VALUES (%s, %s, '{case}')",
                        [code, code.title()])
    return code


def add_unit(tenant: Tenant, level: str, code: str, head_user_id: int | None) -> int:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "INSERT INTO hierarchy_units (level, code, name, head_user_id) VALUES (%s, %s, %s, %s) "
            "RETURNING id",
            [level, code, code.title(), head_user_id],
        ).fetchone()
    assert row is not None
    return int(str(row[0]))


def add_subject(
    tenant: Tenant, product: str, external_id: str, *, title: str = "", assignees: Sequence[int] = (),
    fields: dict[str, Any] | None = None, units: dict[str, int] | None = None,
    forms: dict[str, dict[str, Any]] | None = None,
) -> int:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "INSERT INTO subjects (product, kind, external_id, title) VALUES (%s, 'case', %s, %s) "
            "RETURNING id",
            [product, external_id, title or external_id],
        ).fetchone()
        assert row is not None
        subject_id = int(str(row[0]))
        for user_id in assignees:
            tx.conn.execute("INSERT INTO subject_assignees (subject_id, user_id) VALUES (%s, %s)",
                            [subject_id, user_id])
        for name, value in (fields or {}).items():
            tx.conn.execute("INSERT INTO subject_fields (subject_id, name, value) VALUES (%s, %s, %s)",
                            [subject_id, name, json.dumps(value)])
        for form, answers in (forms or {}).items():
            for field, value in answers.items():
                tx.conn.execute(
                    "INSERT INTO subject_form_answers (subject_id, form, field, value) "
                    "VALUES (%s, %s, %s, %s)",
                    [subject_id, form, field, json.dumps(value)])
        for level, unit_id in (units or {}).items():
            tx.conn.execute("INSERT INTO subject_hierarchy (subject_id, level, unit_id) VALUES (%s, %s, %s)",
                            [subject_id, level, unit_id])
    return subject_id


def reassign(tenant: Tenant, subject_id: int, user_ids: list[int]) -> None:
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("DELETE FROM subject_assignees WHERE subject_id = %s", [subject_id])
        for user_id in user_ids:
            tx.conn.execute("INSERT INTO subject_assignees (subject_id, user_id) VALUES (%s, %s)",
                            [subject_id, user_id])


def add_rule(
    tenant: Tenant, product: str, name: str, *, recipients: list[dict[str, str]],
    title: str = "Case {{ subject.external_id }}", body: str = "Amount {{ field.amount }}",
    channels: tuple[str, ...] = ("email", "in_app"), category: str = "case_alert",
    critical: bool = False,
) -> int:
    """A rule with its version 1 (rules.definition and rule_versions as the rules API writes)."""
    definition = {
        "name": name, "product": product, "kind": "created", "trigger": {},
        "conditions": {"all": []}, "filters": {"all": []},
        "actions": {"channels": list(channels), "category": category, "critical": critical,
                    "recipients": recipients, "template": {"title": title, "body": body}},
        "enabled": True,
    }
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "INSERT INTO rules (product, name, kind, definition) VALUES (%s, %s, 'created', %s) RETURNING id",
            [product, name, json.dumps(definition)],
        ).fetchone()
        assert row is not None
        rule_id = int(str(row[0]))
        tx.conn.execute(
            "INSERT INTO rule_versions (rule_id, version, definition, enabled, changed_by) "
            "VALUES (%s, 1, %s, true, 'test')",
            [rule_id, json.dumps(definition)],
        )
    return rule_id


def add_event(
    tenant: Tenant, product: str, subject_id: int, *, metadata: dict[str, Any] | None = None
) -> int:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "INSERT INTO events (product, subject_id, event_type, metadata, occurred_at, source, status) "
            "VALUES (%s, %s, 'created', %s, now(), 'cli', 'evaluated') RETURNING id",
            [product, subject_id, json.dumps(metadata or {})],
        ).fetchone()
    assert row is not None
    return int(str(row[0]))


def claim_rule(tenant: Tenant, rule_id: int, subject_id: int, event_id: int) -> int:
    """The ledger row a firing rule claims (the lead's evaluation writes it for real)."""
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            """
            INSERT INTO notification_ledger
                (rule, subject_kind, subject_id, threshold, due_on, local_date,
                 rule_id, rule_version, event_id)
            VALUES ('rule:' || %(rule)s, 'subject', %(subject)s, 'event:' || %(event)s,
                    current_date, current_date, %(rule)s, 1, %(event)s)
            RETURNING id
            """,
            {"rule": rule_id, "subject": subject_id, "event": event_id},
        ).fetchone()
    assert row is not None
    return int(str(row[0]))


def fire(tenant: Tenant, rule_id: int, subject_id: int, product: str = "fraud") -> int:
    """An event on the subject and the rule's claim for it: what evaluation leaves behind."""
    return claim_rule(tenant, rule_id, subject_id, add_event(tenant, product, subject_id))
