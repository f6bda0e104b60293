"""Each signed checkpoint (periodic, manual, or with an export) is emailed to the organisation's
compliance address through the email provider, once, and the sending is recorded; with no
address, nothing is sent. The local SES endpoint is what receives it."""

from __future__ import annotations

import json
from datetime import date, timedelta

import pytest

from actors.evidence import email_checkpoint, verify_evidence
from db.evidence.checkpoints import checkpoint_and_keep
from db.evidence.pack import PackSelection, build_pack
from db.evidence.settings import evidence_settings, set_evidence_settings
from db.notices.licence_scan import claim_due_milestones
from db.platform.tenancy import Tenant, tenant_tx
from domain.errors import InvalidInput
from tests.integration.builders import add_client, scalar
from tests.integration.conftest import RunningWorker, SesOutbox
from tocsin.core import runtime
from tocsin.core.clock import utcnow
from tocsin.core.evidence_signing import checkpoint_signer

DPO = "dpo@compliance.example"


def _compliance_address(tenant: Tenant, address: str | None) -> None:
    with tenant_tx(tenant.slug) as tx:
        set_evidence_settings(tx, address, None)


def test_a_periodic_checkpoint_reaches_the_compliance_address_once_and_is_recorded(
        tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> None:
    _compliance_address(tenant, DPO)
    verify_evidence.send(tenant.slug)  # what the clock runs: verify, then sign a checkpoint
    worker.drain()
    sent = [m for m in ses.sent() if m.to == DPO]
    assert len(sent) == 1
    checkpoint_id, seq, head = (
        scalar(tenant, f"SELECT {c} FROM evidence_checkpoints WHERE reason = 'periodic'")
        for c in ("id", "seq", "head_hash"))
    assert f"sequence {seq} (periodic)" in sent[0].subject
    assert head in sent[0].body and checkpoint_signer(runtime.settings()).public_key_hex in sent[0].body
    assert sent[0].message_id.startswith(f"<evidence-checkpoint-{checkpoint_id}.{tenant.slug}@")
    signed = json.loads(sent[0].body[sent[0].body.index("{"):sent[0].body.rindex("}") + 1])
    assert (signed["seq"], signed["head_hash"]) == (seq, head)
    assert scalar(tenant, "SELECT state || ' ' || attempts || ' ' || (provider_message_id IS NOT NULL) "
                  "FROM evidence_checkpoint_emails WHERE checkpoint_id = %s", checkpoint_id) == "sent 1 true"

    email_checkpoint.send(tenant.slug, int(str(checkpoint_id)))  # a duplicate message sends nothing
    worker.drain()
    assert len([m for m in ses.sent() if m.to == DPO]) == 1


def test_manual_and_export_checkpoints_are_emailed_too_and_none_without_an_address(
        tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> None:
    checkpoint_and_keep(tenant.slug, "manual", runtime.settings())
    worker.drain()
    assert ses.sent() == [] and scalar(tenant, "SELECT count(*) FROM evidence_checkpoint_emails") == 0

    _compliance_address(tenant, DPO)
    with tenant_tx(tenant.slug) as tx:
        assert evidence_settings(tx).compliance_email == DPO
    checkpoint_and_keep(tenant.slug, "manual", runtime.settings())
    add_client(tenant, date.today() + timedelta(days=7), name="Packed Ltd")
    with tenant_tx(tenant.slug) as tx:
        claim_due_milestones(tx, utcnow())
    build_pack(tenant.slug, PackSelection(), checkpoint_signer(runtime.settings()))
    worker.drain()
    subjects = sorted(m.subject.rsplit("(", 1)[1] for m in ses.sent() if m.to == DPO)
    assert subjects == ["export)", "manual)"]
    assert scalar(tenant, "SELECT count(*) FROM evidence_checkpoint_emails WHERE state = 'sent'") == 2


def test_the_compliance_address_is_audited_and_a_malformed_one_is_refused(tenant: Tenant) -> None:
    _compliance_address(tenant, DPO)
    with tenant_tx(tenant.slug) as tx, pytest.raises(InvalidInput):
        set_evidence_settings(tx, "not an address", None)
    assert scalar(tenant, "SELECT after ->> 'compliance_email' FROM audit_log "
                  "WHERE action = 'settings.evidence'") == DPO
