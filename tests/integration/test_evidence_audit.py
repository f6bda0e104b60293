"""The audit log's rows are chained facts (kind ``audit``, tenant migration 0055): an edit
made by hand, past its append-only triggers, is named by verify; an erased person's rows
still verify (tests/integration/test_evidence_erasure.py)."""

from __future__ import annotations

import pytest

from db.evidence.audit import record_audit
from db.evidence.chain import seal_tenant
from db.evidence.verify import verify_tenant
from db.platform.tenancy import Tenant, tenant_tx
from domain.audit import Actor
from tests.integration.builders import scalar


def _audited(tenant: Tenant) -> int:
    """Two audit rows, sealed, verified; the id of the one with before/after JSON."""
    with tenant_tx(tenant.slug) as tx:
        record_audit(tx, "sign_in", "session", 7, actor=Actor.user(7, "ada@client.example", "192.0.2.9"))
        row_id = record_audit(tx, "member.role", "user", 7,
                              before={"role": "member"}, after={"role": "admin"})
    seal_tenant(tenant.slug)
    report = verify_tenant(tenant.slug)
    assert report.ok, [b.describe() for b in report.breaks]
    return row_id


def _edit_by_hand(tenant: Tenant, statement: str) -> None:
    """As a superuser would: the append-only triggers disabled for the one statement."""
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
        tx.conn.execute(statement)
        tx.conn.execute("ALTER TABLE audit_log ENABLE TRIGGER USER")


def test_every_audit_row_is_chained(tenant: Tenant) -> None:
    _audited(tenant)
    assert scalar(tenant, "SELECT count(*) FROM audit_log") == scalar(
        tenant, "SELECT count(*) FROM evidence_chain WHERE kind = 'audit'")


@pytest.mark.parametrize(("edit", "field"), [
    ("after = '{\"role\": \"owner\"}'", "changes"),
    ("action = 'member.invite'", "action"),
    ("actor_label = 'mallory@client.example'", "actor_label"),
    ("occurred_at = occurred_at - interval '1 day'", "occurred_at"),
])
def test_verify_names_an_audit_row_edited_by_hand(tenant: Tenant, edit: str, field: str) -> None:
    row_id = _audited(tenant)
    if field == "actor_label":  # an address someone else uses: its digest is known to differ
        with tenant_tx(tenant.slug) as tx:
            record_audit(tx, "sign_in", "session", 8, actor=Actor.user(8, "mallory@client.example", None))
        seal_tenant(tenant.slug)
    seq = scalar(tenant, "SELECT seq FROM evidence_chain WHERE kind = 'audit' AND ref = %s", str(row_id))
    _edit_by_hand(tenant, f"UPDATE audit_log SET {edit} WHERE id = {row_id}")
    report = verify_tenant(tenant.slug)
    first = report.first_break
    assert first is not None
    assert (first.seq, first.table, first.ref) == (seq, "audit_log", str(row_id))
    assert first.what.startswith(f"{field} is "), first.describe()


def test_verify_names_an_audit_row_deleted_by_hand(tenant: Tenant) -> None:
    row_id = _audited(tenant)
    _edit_by_hand(tenant, f"DELETE FROM audit_log WHERE id = {row_id}")
    first = verify_tenant(tenant.slug).first_break
    assert first is not None
    assert (first.table, first.ref, first.what) == ("audit_log", str(row_id), "the row is missing (deleted)")
