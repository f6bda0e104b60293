"""Per-tenant retention of message bodies and addresses: the clock's pass blanks what is older
than the retention and keeps what is newer, touches nothing the chain records, and
`tocsin evidence verify` still passes afterwards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from actors.email import deliver_email
from actors.evidence import retain_evidence, retention_tick
from db.evidence.retention import RETAINED_MARK, apply_retention
from db.evidence.settings import set_evidence_settings
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import add_client, scalar
from tests.integration.conftest import RunningWorker, SesOutbox
from tests.integration.test_cli import run
from tocsin.core.clock import pinned

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)
RETENTION_DAYS = 30


def _notices(tenant: Tenant, worker: RunningWorker, name: str, days: int) -> list[int]:
    """A client whose reminder is claimed, prepared and emailed: its notifications' ids."""
    add_client(tenant, AS_OF.date() + timedelta(days=days), name=name, users=1)
    with tenant_tx(tenant.slug) as tx:
        claim_due_milestones(tx, AS_OF)
        prepare_claims(tx)
        ids = [int(str(r[0])) for r in tx.conn.execute(
            "SELECT d.id FROM notification_deliveries d WHERE d.channel = 'email' AND d.status = 'pending'"
        ).fetchall()]
    for delivery_id in ids:
        deliver_email.send(tenant.slug, delivery_id)
    worker.drain()
    with tenant_tx(tenant.slug) as tx:
        # What a provider's refusal would have left: error texts that may name the recipient.
        tx.conn.execute("UPDATE delivery_attempts SET error = 'rejected: ' || %s WHERE delivery_id = ANY(%s)",
                        [name, ids])
        tx.conn.execute("UPDATE notification_deliveries SET last_error = 'rejected: ' || %s "
                        "WHERE id = ANY(%s)", [name, ids])
        notices = [int(str(r[0])) for r in tx.conn.execute(
            "SELECT notification_id FROM notification_deliveries WHERE id = ANY(%s)", [ids]).fetchall()]
        # The same notices as a text and a chat message, as those channels leave them.
        tx.conn.execute("INSERT INTO sms_deliveries (notification_id, status) "
                        "SELECT unnest(%s::bigint[]), 'cancelled'", [notices])
        tx.conn.execute("INSERT INTO sms_attempts (delivery_id, attempt_no, claim_token, phone, error) "
                        "SELECT id, 1, gen_random_uuid(), '+447700900123', 'rejected: ' || %s "
                        "FROM sms_deliveries WHERE notification_id = ANY(%s)", [name, notices])
        tx.conn.execute("INSERT INTO chat_deliveries (ledger_id, channel, webhook_url, title, text, href, "
                        "status) SELECT ledger_id, 'slack', 'https://hooks.slack.example/x', title, "
                        "'about ' || %s, '/', 'cancelled' FROM notifications WHERE id = ANY(%s)",
                        [name, notices])
        return notices


def _elsewhere(tenant: Tenant, notification_ids: list[int]) -> set[str]:
    """What the text and chat channels still hold about these notices."""
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute(
            "SELECT coalesce(a.phone, ''), coalesce(a.error, ''), c.title, c.text FROM notifications n "
            "JOIN sms_deliveries s ON s.notification_id = n.id JOIN sms_attempts a ON a.delivery_id = s.id "
            "JOIN chat_deliveries c ON c.ledger_id = n.ledger_id WHERE n.id = ANY(%s)",
            [notification_ids]).fetchall()
    return {str(v) for r in rows for v in r}


def _texts(tenant: Tenant, notification_ids: list[int]) -> set[str]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute(
            "SELECT n.title, n.body, n.data::text, coalesce(d.last_error, ''), coalesce(a.error, '') "
            "FROM notifications n JOIN notification_deliveries d ON d.notification_id = n.id "
            "LEFT JOIN delivery_attempts a ON a.delivery_id = d.id WHERE n.id = ANY(%s)",
            [notification_ids]).fetchall()
    return {str(v) for r in rows for v in r}


def test_bodies_and_addresses_older_than_the_retention_are_blanked_newer_kept_and_the_chain_verifies(
        tenant: Tenant, worker: RunningWorker, ses: SesOutbox, capsys: pytest.CaptureFixture[str]) -> None:
    old = _notices(tenant, worker, "Oldco Ltd", 7)
    between = scalar(tenant, "SELECT clock_timestamp()")  # after the old rows, before the new ones
    assert isinstance(between, datetime)
    new = _notices(tenant, worker, "Newco Ltd", 8)
    assert "rejected: Oldco Ltd" in _texts(tenant, old) and "rejected: Newco Ltd" in _texts(tenant, new)
    with tenant_tx(tenant.slug) as tx:
        set_evidence_settings(tx, None, RETENTION_DAYS)

    # The clock's pass, on the day the old rows are past the retention and the new ones not yet.
    with pinned(between + timedelta(days=RETENTION_DAYS)):
        retention_tick.send()
        worker.drain()
    assert _texts(tenant, old) == {RETAINED_MARK, "", "{}"}
    assert "rejected: Newco Ltd" in _texts(tenant, new) and RETAINED_MARK not in _texts(tenant, new)
    assert scalar(tenant, "SELECT count(*) FROM notifications WHERE title = %s", RETAINED_MARK) == len(old)
    assert _elsewhere(tenant, old) == {"", RETAINED_MARK}
    assert {"+447700900123", "about Newco Ltd"} <= _elsewhere(tenant, new)
    # What happened stays: dates, statuses, outcomes.
    outcomes = scalar(tenant, "SELECT count(*) FROM delivery_attempts WHERE outcome IS NOT NULL")
    assert outcomes >= len(old + new)
    recorded = "SELECT after ->> 'notifications' FROM audit_log WHERE action = 'evidence.retention'"
    assert scalar(tenant, recorded) == str(len(old))

    code, out, _err = run(capsys, "evidence", "verify", "--tenant", tenant.slug)
    assert code == 0 and out.strip().endswith(": OK"), out

    # A second pass finds nothing left to blank, and records nothing.
    with pinned(between + timedelta(days=RETENTION_DAYS)):
        retain_evidence.send(tenant.slug)
        worker.drain()
    assert scalar(tenant, "SELECT count(*) FROM audit_log WHERE action = 'evidence.retention'") == 1


def test_without_a_retention_nothing_is_blanked(
        tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> None:
    kept = _notices(tenant, worker, "Keptco Ltd", 7)
    done = apply_retention(tenant.slug, datetime.now(UTC) + timedelta(days=36_500))
    assert done.retention_days is None and done.rows == 0
    assert "rejected: Keptco Ltd" in _texts(tenant, kept)
