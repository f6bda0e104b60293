"""Signed checkpoints: each names the head it signed with its key; a rotated key's
checkpoints still verify; an edited checkpoint, or a chain cut back below a checkpoint,
is named by verify; a copy goes to a file outside the database."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from db.evidence.checkpoints import checkpoints, sign_checkpoint, write_checkpoint_file
from db.evidence.verify import verify_tenant
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import add_client
from tests.integration.test_cli import run
from tocsin.core.evidence_signing import signature_holds, signer_for

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)
OLD_SECRET = "an-old-session-secret-of-at-least-thirty-two-bytes"
NEW_SECRET = "a-new-session-secret-of-at-least-thirty-two-bytes!"


def _claims(tenant: Tenant, n: int) -> None:
    add_client(tenant, AS_OF.date() + timedelta(days=7 + n), name=f"Signed {n}", users=1)
    with tenant_tx(tenant.slug) as tx:
        claim_due_milestones(tx, AS_OF)
        prepare_claims(tx)


def test_checkpoints_signed_before_and_after_a_key_rotation_all_verify(tenant: Tenant) -> None:
    _claims(tenant, 0)
    first = sign_checkpoint(tenant.slug, "periodic", signer_for(OLD_SECRET))
    _claims(tenant, 1)
    second = sign_checkpoint(tenant.slug, "export", signer_for(NEW_SECRET))
    assert first.key_id != second.key_id and second.seq > first.seq > 0
    with tenant_tx(tenant.slug) as tx:
        kept = checkpoints(tx)
    assert [c.id for c in kept] == [second.id, first.id]
    for checkpoint in kept:
        assert signature_holds(checkpoint.public_key, checkpoint.text, checkpoint.signature)
    report = verify_tenant(tenant.slug)
    assert report.ok, [b.describe() for b in report.breaks]


def test_verify_names_an_edited_checkpoint_and_a_chain_cut_below_one(tenant: Tenant) -> None:
    _claims(tenant, 0)
    checkpoint = sign_checkpoint(tenant.slug, "manual", signer_for(NEW_SECRET))
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE evidence_checkpoints SET seq = seq - 1 WHERE id = %s", [checkpoint.id])
    first = verify_tenant(tenant.slug).first_break
    assert first is not None and first.table == "evidence_checkpoints" and "signature" in first.what

    with tenant_tx(tenant.slug) as tx:  # undo, then cut the chain's end and its head back together
        tx.conn.execute("UPDATE evidence_checkpoints SET seq = seq + 1 WHERE id = %s", [checkpoint.id])
        tx.conn.execute("DELETE FROM evidence_chain WHERE seq = %s", [checkpoint.seq])
        tx.conn.execute("UPDATE evidence_head SET seq = seq - 1, hash = (SELECT hash FROM evidence_chain "
                        "WHERE seq = %s)", [checkpoint.seq - 1])
    breaks = verify_tenant(tenant.slug).breaks
    assert any(b.table == "evidence_checkpoints" and "beyond the chain's end" in b.what for b in breaks)


def test_a_checkpoint_is_copied_to_a_file_and_the_cli_shows_the_key(
        tenant: Tenant, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _claims(tenant, 0)
    checkpoint = sign_checkpoint(tenant.slug, "manual", signer_for(NEW_SECRET))
    path = write_checkpoint_file(tmp_path, checkpoint)
    [line] = path.read_text().splitlines()
    kept = json.loads(line)
    assert (kept["seq"], kept["head_hash"], kept["key_id"]) == (checkpoint.seq, checkpoint.head_hash,
                                                                 checkpoint.key_id)
    assert signature_holds(kept["public_key"], kept["signed_text"], kept["signature"])

    code, out, _err = run(capsys, "evidence", "key", "--tenant", tenant.slug)
    assert code == 0 and "public key:" in out and checkpoint.key_id in out
    code, out, _err = run(capsys, "evidence", "checkpoint", "--tenant", tenant.slug)
    assert code == 0 and f"{tenant.slug}: checkpoint" in out
