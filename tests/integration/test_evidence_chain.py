"""The evidence chain: facts written by the real use cases are sealed into one line per
tenant, the SQL and Python canonical encodings agree, and verify names each kind of tampering
by hand (sequence, table, id and what differs)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from actors.email import deliver_email
from db.delivery.inbox import acknowledge
from db.evidence.chain import chain_head, seal_tenant
from db.evidence.verify import verify_tenant
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.platform.tenancy import Tenant, tenant_tx
from domain.evidence.canonical import canonical_payload
from domain.evidence.verification import ChainReport
from tests.integration.builders import add_client, scalar
from tests.integration.conftest import RunningWorker, SesOutbox

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)


def _history(tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> None:
    """Claims, deliveries, attempts and their outcomes, and an acknowledgement, written by
    the real scan, fan-out, worker and inbox."""
    _client, people = add_client(tenant, AS_OF.date() + timedelta(days=7), name="Chain Ltd", users=2)
    with tenant_tx(tenant.slug) as tx:
        claim_due_milestones(tx, AS_OF)
        prepare_claims(tx)
    for delivery_id in [int(r[0]) for r in _all(tenant, "SELECT id FROM notification_deliveries "
                                                        "WHERE channel = 'email'")]:
        deliver_email.send(tenant.slug, delivery_id)
    worker.drain()
    notice = int(scalar(tenant, "SELECT id FROM notifications WHERE recipient_user_id = %s", people[0].id))
    with tenant_tx(tenant.slug) as tx:
        acknowledge(tx, people[0].id, notice)


def _all(tenant: Tenant, query: str, *params: object) -> list[tuple[object, ...]]:
    with tenant_tx(tenant.slug) as tx:
        return tx.conn.execute(query, list(params)).fetchall()


def _tamper(tenant: Tenant, *statements: str) -> None:
    """Statements run by hand, as someone with write access to the database would."""
    with tenant_tx(tenant.slug) as tx:
        for statement in statements:
            tx.conn.execute(statement)


def _sealed_history(tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> ChainReport:
    _history(tenant, worker, ses)
    seal_tenant(tenant.slug)
    report = verify_tenant(tenant.slug)
    assert report.ok, [b.describe() for b in report.breaks]
    return report


def test_the_facts_of_a_claims_life_are_chained_and_verify(
        tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> None:
    report = _sealed_history(tenant, worker, ses)
    kinds = {str(r[0]) for r in _all(tenant, "SELECT DISTINCT kind FROM evidence_chain")}
    assert {"claim", "delivery", "delivery_status", "attempt", "attempt_outcome", "delivered",
            "acknowledged"} <= kinds
    assert report.records == scalar(tenant, "SELECT count(*) FROM evidence_chain") > 0
    with tenant_tx(tenant.slug) as tx:
        head = chain_head(tx)
    assert (head.seq, head.hash, head.pending) == (report.head_seq, report.head_hash, 0)


def test_sealing_twice_changes_nothing(tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> None:
    report = _sealed_history(tenant, worker, ses)
    assert seal_tenant(tenant.slug) == 0
    assert verify_tenant(tenant.slug).head_seq == report.head_seq


@pytest.mark.parametrize("text", ["plain", 'quote " and \\ backslash', "tab\tnew\nline\r\x01\x1f\x7f",
                                  "é ü 漢字 \u2028 🙂", "</script>&amp;"])
def test_the_sql_and_python_encodings_agree(tenant: Tenant, text: str) -> None:
    instant = datetime(2027, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "SELECT '{\"a\":' || control.ev_text(%(t)s) || ',\"b\":' || control.ev_time(%(i)s)"
            " || ',\"c\":' || control.ev_date(%(d)s) || ',\"d\":' || control.ev_int(%(n)s)"
            " || ',\"e\":' || control.ev_bool(true) || ',\"f\":' || control.ev_text(NULL) || '}'",
            {"t": text, "i": instant, "d": instant.date(), "n": -9_007_199_254_740_993}).fetchone()
    assert row is not None
    assert row[0] == canonical_payload({"a": text, "b": instant, "c": instant.date(),
                                        "d": -9_007_199_254_740_993, "e": True, "f": None})


def test_verify_names_a_claims_date_updated_by_hand(
        tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> None:
    _sealed_history(tenant, worker, ses)
    claim_id, due_on = _all(tenant, "SELECT id, due_on FROM notification_ledger ORDER BY id LIMIT 1")[0]
    seq = scalar(tenant, "SELECT seq FROM evidence_chain WHERE kind = 'claim' AND ref = %s", str(claim_id))
    _tamper(tenant, f"UPDATE notification_ledger SET due_on = due_on + 1 WHERE id = {claim_id}")
    first = verify_tenant(tenant.slug).first_break
    assert first is not None
    assert (first.seq, first.table, first.ref) == (seq, "notification_ledger", str(claim_id))
    assert first.describe() == (
        f"sequence {seq}, notification_ledger {claim_id}: due_on is "
        f"'{due_on + timedelta(days=1)}', the chain says '{due_on}'")  # type: ignore[operator]


def test_verify_names_an_attempt_deleted_by_hand(
        tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> None:
    _sealed_history(tenant, worker, ses)
    attempt_id = scalar(tenant, "SELECT max(id) FROM delivery_attempts")
    seq = scalar(tenant, "SELECT seq FROM evidence_chain WHERE kind = 'attempt' AND ref = %s",
                 str(attempt_id))
    _tamper(tenant, f"DELETE FROM delivery_attempts WHERE id = {attempt_id}")
    first = verify_tenant(tenant.slug).first_break
    assert first is not None
    assert first.describe() == f"sequence {seq}, delivery_attempts {attempt_id}: the row is missing (deleted)"


def test_verify_names_a_claim_inserted_by_hand_without_its_record(
        tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> None:
    _sealed_history(tenant, worker, ses)
    # As a restore or a careful forger would: with triggers off for the session.
    _tamper(tenant, "SET LOCAL session_replication_role = replica",
            "INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on, local_date) "
            "VALUES ('licence', 'client', 1, 'd30', '2027-01-01', '2026-12-01')")
    forged = scalar(tenant, "SELECT max(id) FROM notification_ledger")
    first = verify_tenant(tenant.slug).first_break
    assert first is not None
    assert (first.seq, first.table, first.ref) == (None, "notification_ledger", str(forged))
    assert "never chained" in first.describe()


def test_verify_names_two_records_whose_sequence_numbers_were_swapped(
        tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> None:
    _sealed_history(tenant, worker, ses)
    _tamper(tenant, "UPDATE evidence_chain SET seq = seq + 1000000 WHERE seq IN (2, 3)",
            "UPDATE evidence_chain SET seq = CASE seq WHEN 1000002 THEN 3 ELSE 2 END "
            "WHERE seq IN (1000002, 1000003)")
    first = verify_tenant(tenant.slug).first_break
    assert first is not None and first.seq == 2
    assert "previous hash" in first.what


def test_verify_names_a_truncated_chain(tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> None:
    report = _sealed_history(tenant, worker, ses)
    _tamper(tenant, "TRUNCATE evidence_chain")
    after = verify_tenant(tenant.slug)
    assert after.records == 0 and not after.ok
    first = after.first_break
    assert first is not None and first.table == "evidence_head"
    assert f"the head says sequence {report.head_seq}, the chain ends at 0" in first.what
    assert len([b for b in after.breaks if "never chained" in b.what]) == after.rows


def test_verify_names_a_chained_record_edited_in_place(
        tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> None:
    _sealed_history(tenant, worker, ses)
    seq = scalar(tenant, "SELECT min(seq) FROM evidence_chain WHERE kind = 'claim'")
    _tamper(tenant, "UPDATE evidence_chain SET payload = replace(payload, '\"threshold\":\"d', "
                    f"'\"threshold\":\"x') WHERE seq = {seq}")
    first = verify_tenant(tenant.slug).first_break
    assert first is not None and first.seq == seq and "edited" in first.what
