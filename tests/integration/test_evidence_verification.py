"""`tocsin evidence verify` and the periodic verification: the result is recorded for the
evidence page, and a break alerts ops once, however many verifications find it again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from actors.evidence import seal_tick, verify_tick
from db.evidence.checkpoints import checkpoints
from db.evidence.verifications import last_verification, verify_and_record
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import add_client, scalar
from tests.integration.conftest import RunningWorker
from tests.integration.test_cli import run
from tocsin.shell.cli_evidence import EXIT_BROKEN

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)


def _claims(tenant: Tenant, clients: int = 3) -> None:
    for n in range(clients):
        add_client(tenant, AS_OF.date() + timedelta(days=7 + n), name=f"Verified {n}", users=1)
    with tenant_tx(tenant.slug) as tx:
        claim_due_milestones(tx, AS_OF)
        prepare_claims(tx)


def _tamper(tenant: Tenant, statement: str) -> None:
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute(statement)


def _alerts(tenant: Tenant) -> int:
    return int(scalar(tenant, "SELECT count(*) FROM ops_alerts WHERE kind = 'evidence_break'"))


def test_the_cli_verifies_a_sound_chain_and_names_the_first_broken_record(
        tenant: Tenant, capsys: pytest.CaptureFixture[str]) -> None:
    _claims(tenant)
    code, out, _err = run(capsys, "evidence", "seal", "--tenant", tenant.slug)
    assert code == 0 and "sealed" in out
    code, out, _err = run(capsys, "evidence", "verify", "--tenant", tenant.slug)
    assert code == 0, out
    assert out.strip().endswith(": OK") and "records/s" in out

    claim = scalar(tenant, "SELECT min(id) FROM notification_ledger")
    seq = scalar(tenant, "SELECT seq FROM evidence_chain WHERE kind = 'claim' AND ref = %s", str(claim))
    _tamper(tenant, f"UPDATE notification_ledger SET threshold = 'd1' WHERE id = {claim}")
    code, out, _err = run(capsys, "evidence", "verify", "--tenant", tenant.slug)
    assert code == EXIT_BROKEN
    assert f"first broken record: sequence {seq}, notification_ledger {claim}: threshold is 'd1'" in out


def test_a_break_alerts_ops_once_and_the_last_verification_is_kept(tenant: Tenant) -> None:
    _claims(tenant)
    report, run_ = verify_and_record(tenant.slug)
    assert report.ok and not run_.alerted and _alerts(tenant) == 0

    delivery = scalar(tenant, "SELECT min(id) FROM notification_deliveries")
    _tamper(tenant, f"UPDATE notification_deliveries SET channel = 'in_app' WHERE id = {delivery}")
    alerted = [verify_and_record(tenant.slug)[1].alerted for _ in range(3)]
    assert alerted == [True, False, False]
    assert _alerts(tenant) == 1
    with tenant_tx(tenant.slug) as tx:
        last = last_verification(tx)
    assert last is not None and not last.ok
    assert last.first_break is not None and f"notification_deliveries {delivery}: channel" in last.first_break

    # Another break is another alert.
    _tamper(tenant, "DELETE FROM evidence_chain WHERE seq = 1")
    assert verify_and_record(tenant.slug)[1].alerted
    assert _alerts(tenant) == 2


def test_the_clocks_ticks_seal_verify_and_sign_through_the_worker(
        tenant: Tenant, worker: RunningWorker) -> None:
    _claims(tenant)
    seal_tick.send()
    worker.drain()
    assert scalar(tenant, "SELECT count(*) FROM evidence_pending") == 0
    verify_tick.send()
    worker.drain()
    with tenant_tx(tenant.slug) as tx:
        last = last_verification(tx)
        signed = checkpoints(tx)
    assert last is not None and last.ok and last.records > 0
    assert [c.reason for c in signed] == ["periodic"] and signed[0].seq == last.head_seq


def test_a_chain_verified_in_parts_gives_the_same_report_as_one_pass(
        tenant: Tenant, capsys: pytest.CaptureFixture[str]) -> None:
    """`verify --parts N` splits the work over processes (db/evidence/verify_parts.py): by
    ranges of records and by rows, the breaks are those of one pass, the first one first."""
    from db.evidence.chain import seal_tenant
    from db.evidence.verify import verify_tenant

    _claims(tenant, clients=6)
    seal_tenant(tenant.slug)
    sound = verify_tenant(tenant.slug, parts=3)
    assert sound.ok and (sound.records, sound.rows) == (verify_tenant(tenant.slug, parts=0).records,
                                                        verify_tenant(tenant.slug, parts=0).rows)
    claim = scalar(tenant, "SELECT min(id) FROM notification_ledger")
    _tamper(tenant, f"UPDATE notification_ledger SET threshold = 'd1' WHERE id = {claim}")
    _tamper(tenant, "DELETE FROM delivery_attempts WHERE id = (SELECT max(id) FROM delivery_attempts)")
    _tamper(tenant, "UPDATE evidence_chain SET payload = payload || ' ' WHERE seq = 5")
    _tamper(tenant, "UPDATE evidence_chain SET seq = seq + 1000000 WHERE seq IN (8, 9)")
    _tamper(tenant, "UPDATE evidence_chain SET seq = CASE seq WHEN 1000008 THEN 9 ELSE 8 END "
                    "WHERE seq IN (1000008, 1000009)")  # two records swapped: link and hash broken
    one_pass, in_parts = verify_tenant(tenant.slug, parts=0), verify_tenant(tenant.slug, parts=3)
    assert not one_pass.ok and sorted(in_parts.breaks) == sorted(one_pass.breaks)
    assert in_parts.first_break == one_pass.first_break
    assert (in_parts.records, in_parts.rows, in_parts.head_seq) == (
        one_pass.records, one_pass.rows, one_pass.head_seq)
    code, out, _err = run(capsys, "evidence", "verify", "--tenant", tenant.slug, "--parts", "3")
    assert code == EXIT_BROKEN and f"first broken record: {one_pass.first_break.describe()}" in out
