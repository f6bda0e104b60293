"""SMS texts and Slack/Teams chat messages are chained facts, as webhook deliveries are: a
delivery, each status move, each attempt once it is called or ends, and its outcome (tenant
migration 0058). The chain verifies after a send, a refusal and retries; editing or deleting
a text's or a chat message's attempt by hand makes verify name it."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from actors.sms import deliver_sms
from db.delivery.chat_channels import save_chat_address, save_chat_channel
from db.evidence.chain import seal_tenant
from db.evidence.verify import verify_tenant
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.notices.rule_notices import prepare_rule_claims
from db.people.sms_settings import save_phone, set_sms_category
from db.platform.tenancy import Tenant, tenant_tx
from domain.notices.licence import CATEGORY
from tests.integration.builders import add_client, scalar
from tests.integration.conftest import RunningWorker, SesOutbox, use_settings, wait_until
from tests.integration.platform_builders import add_person, add_product, add_rule, add_subject, fire
from tests.support.chat_receiver import ChatReceiver

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)


def _kinds(tenant: Tenant, prefix: str) -> Counter[str]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute("SELECT kind FROM evidence_chain WHERE kind LIKE %s",
                               [f"{prefix}%"]).fetchall()
    return Counter(str(r[0]) for r in rows)


def _breaks(tenant: Tenant) -> list[str]:
    seal_tenant(tenant.slug)
    return sorted(b.describe() for b in verify_tenant(tenant.slug).breaks)


def _seq(tenant: Tenant, kind: str, ref: int) -> int:
    return int(scalar(tenant, "SELECT seq FROM evidence_chain WHERE kind = %s AND ref = %s", kind, str(ref)))


def _texts(tenant: Tenant, worker: RunningWorker) -> None:
    """Two people due a text, room in the month for one: one accepted, one refused by the
    cap (an attempt ended without a call)."""
    use_settings(sms_monthly_spend_cap=0.015, sms_price_per_segment=0.01)
    _, users = add_client(tenant, AS_OF.date() + timedelta(days=7), name="Texting Ltd", users=2)
    with tenant_tx(tenant.slug) as tx:
        for user, phone in zip(users, ["+447400123456", "+447400123457"], strict=True):
            save_phone(tx, user.id, phone)
            set_sms_category(tx, user.id, CATEGORY, True)
        claim_due_milestones(tx, AS_OF)
        prepare_claims(tx)
        ids = [int(str(r[0])) for r in tx.conn.execute("SELECT id FROM sms_deliveries ORDER BY id")]
    deliver_sms.send(tenant.slug, *ids)
    worker.drain()


def test_sent_and_refused_texts_are_chained_and_an_edited_or_deleted_sms_attempt_is_named(
        tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> None:
    _texts(tenant, worker)
    assert _breaks(tenant) == []
    kinds = _kinds(tenant, "sms")
    assert kinds["sms_delivery"] == 2 and kinds["sms_attempt"] == 2 and kinds["sms_attempt_outcome"] == 2
    assert kinds["sms_delivery_status"] >= 3  # sending, accepted; cancelled
    # The phone number is not in the chain.
    assert scalar(tenant, "SELECT count(*) FROM evidence_chain WHERE payload LIKE %s", "%+4474001234%") == 0

    sent = int(scalar(tenant, "SELECT id FROM sms_attempts WHERE outcome = 'accepted'"))
    refused = int(scalar(tenant, "SELECT id FROM sms_attempts WHERE outcome = 'cancelled'"))
    with tenant_tx(tenant.slug) as tx:  # the publish moved back an hour
        tx.conn.execute("UPDATE sms_attempts SET called_at = called_at - interval '1 hour' WHERE id = %s",
                        [sent])
    [said] = _breaks(tenant)
    seq = _seq(tenant, "sms_attempt", sent)
    assert said.startswith(f"sequence {seq}, sms_attempts {sent}: called_at is '"), said
    assert "the chain says '" in said

    with tenant_tx(tenant.slug) as tx:  # with the triggers off, the price kept made a refund
        tx.conn.execute("SET LOCAL session_replication_role = replica")
        tx.conn.execute("UPDATE sms_attempts SET called_at = called_at + interval '1 hour', cost = NULL "
                        "WHERE id = %s", [sent])
    assert _breaks(tenant) == [
        f"sequence {_seq(tenant, 'sms_attempt_outcome', sent)}, sms_attempts {sent}: "
        "cost is missing, the chain says '0.01000'"]

    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("SET LOCAL session_replication_role = replica")
        tx.conn.execute("UPDATE sms_attempts SET cost = 0.01 WHERE id = %s", [sent])
        tx.conn.execute("DELETE FROM sms_attempts WHERE id = %s", [refused])
    assert _breaks(tenant) == [
        f"sequence {_seq(tenant, 'sms_attempt', refused)}, sms_attempts {refused}: "
        "the row is missing (deleted)"]


def test_retried_chat_attempts_are_chained_and_an_edited_or_deleted_chat_attempt_is_named(
        tenant: Tenant, worker: RunningWorker) -> None:
    use_settings(webhook_retry_base_seconds=0.05)
    product = add_product(tenant)
    person = add_person(tenant, "chat-evidence@example.com")
    answers = {1: 500, 2: 503}
    with ChatReceiver(lambda n: answers.get(n, 200)) as slack:
        with tenant_tx(tenant.slug) as tx:
            admin = add_person(tenant, "admin-slack@example.com")
            save_chat_channel(tx, "slack", enabled=True, webhook_url="", keep_url=False,
                              allow_private=True, by_user_id=admin)
            save_chat_address(tx, person, "slack", slack.url("/services/T1/B1/own"), allow_private=True)
        claim = fire(tenant, add_rule(tenant, product, "Flaky", recipients=[{"type": "assignees"}],
                                      channels=("in_app", "slack")),
                     add_subject(tenant, product, "C-9", assignees=[person]))
        with tenant_tx(tenant.slug) as tx:
            prepare_rule_claims(tx, [claim], None)
        wait_until(lambda: scalar(tenant, "SELECT status FROM chat_deliveries") == "delivered",
                   "delivered after two failures", 30)
        worker.drain()
    assert _breaks(tenant) == []
    kinds = _kinds(tenant, "chat")
    assert kinds["chat_delivery"] == 1 and kinds["chat_attempt"] == 3
    assert kinds["chat_attempt_outcome"] == 3 and kinds["chat_delivery_status"] >= 4
    # The person's own webhook URL (a secret) is not in the chain.
    assert scalar(tenant, "SELECT count(*) FROM evidence_chain WHERE payload LIKE %s",
                  "%/services/T1/B1/own%") == 0

    first = int(scalar(tenant, "SELECT id FROM chat_attempts WHERE attempt_no = 1"))
    last = int(scalar(tenant, "SELECT id FROM chat_attempts WHERE attempt_no = 3"))
    with tenant_tx(tenant.slug) as tx:  # the first call moved back an hour
        tx.conn.execute("UPDATE chat_attempts SET called_at = called_at - interval '1 hour' WHERE id = %s",
                        [first])
    [said] = _breaks(tenant)
    seq = _seq(tenant, "chat_attempt", first)
    assert said.startswith(f"sequence {seq}, chat_attempts {first}: called_at is '"), said

    with tenant_tx(tenant.slug) as tx:  # with the triggers off, the failure made a success
        tx.conn.execute("SET LOCAL session_replication_role = replica")
        tx.conn.execute("UPDATE chat_attempts SET called_at = called_at + interval '1 hour', "
                        "status_code = 200 WHERE id = %s", [first])
    assert _breaks(tenant) == [
        f"sequence {_seq(tenant, 'chat_attempt_outcome', first)}, chat_attempts {first}: "
        "status_code is 200, the chain says 500"]

    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("SET LOCAL session_replication_role = replica")
        tx.conn.execute("UPDATE chat_attempts SET status_code = 500 WHERE id = %s", [first])
        tx.conn.execute("DELETE FROM chat_attempts WHERE id = %s", [last])
    assert _breaks(tenant) == [
        f"sequence {_seq(tenant, 'chat_attempt', last)}, chat_attempts {last}: the row is missing (deleted)"]
