"""Moved and removed due dates cancelled at write time: the subject register (events API,
record_event on a host's connection, the CLI: one path, db/events/outbox.py) cancels the old
date's waiting notices in the transaction that writes the field; the scan still cancels
what a host wrote by the table contract; and the email sender refuses a notice whose
claim was cancelled, or whose date moved, after its message was enqueued."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from actors.email import deliver_email
from db.delivery.deliveries import claim_deliveries
from db.events.outbox import record_events
from db.notices.rule_notices import prepare_rule_claims
from db.notices.scan import run_scan
from db.platform.effects import AnnounceInbox, PrepareClaims, SendEmails
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.time_rules import TimeClaimCounts, claim_time_rules
from domain.events.intake import parse_event
from tests.integration.builders import scalar
from tests.integration.conftest import RunningWorker, SesOutbox
from tests.integration.platform_builders import add_person
from tests.integration.time_rule_support import (
    DUE_FIELD,
    PRODUCT,
    add_metrology,
    add_time_rule,
    keys_once,
    move_due,
    rule_ledger,
    time_rule,
)
from tocsin.core.settings import load_settings
from tocsin.shell.outbox import record_event

AS_OF = datetime(2027, 6, 1, 12, 0, tzinfo=UTC)
TODAY = AS_OF.date()
OLD, NEW = TODAY + timedelta(days=5), TODAY + timedelta(days=20)
MOVED = f"due date moved from {OLD.isoformat()} to {NEW.isoformat()}"


def certificate_event(external_id: str, *, created: bool = False, **fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"product": PRODUCT, "type": "created" if created else "updated",
                             "subject": {"kind": "certificate", "external_id": external_id,
                                         "title": f"Certificate {external_id}", "fields": fields}}
    if not created:
        event["trigger"] = "field_changed"
    return event


def send_events(tenant: Tenant, *events: dict[str, Any]) -> None:
    """Through record_events, as the events API and the CLI record them."""
    parsed = []
    for body in events:
        event, problems = parse_event(body)
        assert event is not None, problems
        parsed.append(event)
    with tenant_tx(tenant.slug) as tx:
        record_events(tx, parsed, "api")


def register(tenant: Tenant, external_id: str, due: date, assignee: str) -> int:
    event = certificate_event(external_id, created=True, **{DUE_FIELD: due.isoformat()})
    event["subject"]["assignees"] = [assignee]
    send_events(tenant, event)
    return int(scalar(tenant, "SELECT id FROM subjects WHERE external_id = %s", external_id))


def claim_and_prepare(tenant: Tenant, subjects: list[int]) -> list[int]:
    """The scan's claim, and the claims of ``subjects`` prepared with their emails marked
    enqueued; the ids of those emails, whose messages the test sends itself."""
    with tenant_tx(tenant.slug) as tx:
        claim_time_rules(tx, AS_OF)
        tx.take(PrepareClaims)
    with tenant_tx(tenant.slug) as tx:
        prepare_rule_claims(tx, [r["id"] for r in rule_ledger(tenant)
                                 if r["subject_id"] in subjects and r["status"] == "claimed"])
        to_send = tx.take(SendEmails)  # enqueued, the message not yet delivered to a worker
        emails = to_send.delivery_ids if to_send else []
        tx.take(AnnounceInbox)
    return emails


def old_date_rows(tenant: Tenant, subject: int) -> list[tuple[str, str, str | None]]:
    return [(r["threshold"], r["status"], r["status_reason"]) for r in rule_ledger(tenant)
            if r["subject_id"] == subject and r["due_on"] == OLD]


def deliveries_of(tenant: Tenant, subject: int) -> list[tuple[str, str | None, int]]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute(
            "SELECT d.status, d.status_reason, d.attempts FROM notification_deliveries d "
            "JOIN notifications n ON n.id = d.notification_id "
            "JOIN notification_ledger l ON l.id = n.ledger_id WHERE l.subject_id = %s ORDER BY d.id",
            [subject]).fetchall()
    return [(str(r[0]), None if r[1] is None else str(r[1]), int(r[2])) for r in rows]


def unarchived(tenant: Tenant, subject: int) -> int:
    return int(scalar(tenant, "SELECT count(*) FROM notifications n JOIN notification_ledger l "
                              "ON l.id = n.ledger_id WHERE l.subject_id = %s AND n.archived_at IS NULL",
                      subject))


def test_a_due_date_moved_through_the_register_cancels_at_once_without_a_scan(tenant: Tenant) -> None:
    add_metrology(tenant)
    add_person(tenant, "tech@example.com")
    add_time_rule(tenant)
    prepared = register(tenant, "C1", OLD, "tech@example.com")
    unprepared = register(tenant, "C2", OLD, "tech@example.com")
    claim_and_prepare(tenant, [prepared])
    assert deliveries_of(tenant, prepared) == [("pending", None, 0)]

    send_events(tenant, certificate_event("C1", **{DUE_FIELD: NEW.isoformat()}),
                certificate_event("C2", **{DUE_FIELD: NEW.isoformat()}))

    for subject in (prepared, unprepared):  # no scan has run since
        assert old_date_rows(tenant, subject) == [
            ("offset:-30", "skipped", "a later milestone's window had begun"),
            ("offset:-7", "cancelled", MOVED)]
    assert deliveries_of(tenant, prepared) == [("cancelled", MOVED, 0)]
    assert unarchived(tenant, prepared) == 0
    # The scan has nothing left to cancel, and claims the new date's cycle.
    report = run_scan(tenant.slug, AS_OF + timedelta(hours=1))
    assert report.time.cancelled == 0
    assert {(r["subject_id"], r["threshold"], r["status"]) for r in rule_ledger(tenant)
            if r["due_on"] == NEW} == {(s, "offset:-30", "claimed") for s in (prepared, unprepared)}
    assert keys_once(tenant)


def test_a_due_date_removed_through_the_register_cancels_with_the_reason(tenant: Tenant) -> None:
    add_metrology(tenant)
    add_person(tenant, "tech@example.com")
    add_time_rule(tenant)
    subject = register(tenant, "C1", OLD, "tech@example.com")
    claim_and_prepare(tenant, [subject])
    send_events(tenant, certificate_event("C1", **{DUE_FIELD: None}))
    assert old_date_rows(tenant, subject)[-1] == ("offset:-7", "cancelled", "due date removed")
    assert deliveries_of(tenant, subject) == [("cancelled", "due date removed", 0)]
    # No date: nothing to claim, nothing left to cancel.
    assert run_scan(tenant.slug, AS_OF + timedelta(hours=1)).time == TimeClaimCounts()


def test_another_field_or_the_same_date_written_again_cancels_nothing(tenant: Tenant) -> None:
    add_metrology(tenant)
    add_person(tenant, "tech@example.com")
    add_time_rule(tenant)
    subject = register(tenant, "C1", OLD, "tech@example.com")
    claim_and_prepare(tenant, [subject])
    send_events(tenant, certificate_event("C1", **{DUE_FIELD: OLD.isoformat(), "serial": "S-9"}),
                certificate_event("C1", serial="S-10"))
    # Moved and moved back within one batch: the register's diff sees no change.
    send_events(tenant, certificate_event("C1", **{DUE_FIELD: NEW.isoformat()}),
                certificate_event("C1", **{DUE_FIELD: OLD.isoformat()}))
    assert old_date_rows(tenant, subject)[-1] == ("offset:-7", "claimed", None)
    assert deliveries_of(tenant, subject) == [("pending", None, 0)]


def test_a_disabled_rule_or_a_rule_on_another_field_cancels_nothing(tenant: Tenant) -> None:
    add_metrology(tenant)
    add_person(tenant, "tech@example.com")
    add_time_rule(tenant)
    other = time_rule(name="Inspection due", trigger={"subject_kind": "certificate", "due": {
        "fact": "field.inspection_due", "offsets": [-7]}})
    add_time_rule(tenant, other)
    event = certificate_event("C1", created=True, **{DUE_FIELD: OLD.isoformat(),
                                                      "inspection_due": OLD.isoformat()})
    event["subject"]["assignees"] = ["tech@example.com"]
    send_events(tenant, event)
    claim_and_prepare(tenant, [])
    send_events(tenant, certificate_event("C1", inspection_due=NEW.isoformat()))
    statuses = {(r["rule_id"], r["threshold"], r["status"]) for r in rule_ledger(tenant)}
    assert {s for _, t, s in statuses if t == "offset:-7"} == {"claimed", "cancelled"}
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE rules SET enabled = false")
    send_events(tenant, certificate_event("C1", **{DUE_FIELD: NEW.isoformat()}))
    assert sorted(r["status"] for r in rule_ledger(tenant) if r["threshold"] == "offset:-7") \
        == ["cancelled", "claimed"]  # the disabled rule's claim is left as it was


def test_record_event_on_a_host_connection_cancels_in_the_host_s_transaction(tenant: Tenant) -> None:
    add_metrology(tenant)
    add_person(tenant, "tech@example.com")
    add_time_rule(tenant)
    subject = register(tenant, "C1", OLD, "tech@example.com")
    claim_and_prepare(tenant, [subject])
    moved = certificate_event("C1", **{DUE_FIELD: NEW.isoformat()})
    with psycopg.connect(load_settings().database_url, row_factory=dict_row) as conn:
        record_event(conn, tenant.slug, moved)
        conn.rollback()  # the host's write failed: nothing moved, nothing cancelled
        assert old_date_rows(tenant, subject)[-1] == ("offset:-7", "claimed", None)
        record_event(conn, tenant.slug, moved)
        assert conn.execute("SHOW search_path").fetchone() == {"search_path": '"$user", public'}
        conn.commit()
    assert old_date_rows(tenant, subject)[-1] == ("offset:-7", "cancelled", MOVED)
    assert deliveries_of(tenant, subject) == [("cancelled", MOVED, 0)]


def test_the_scan_cancels_a_date_a_host_removed_by_the_table_contract(tenant: Tenant) -> None:
    add_metrology(tenant)
    add_person(tenant, "tech@example.com")
    add_time_rule(tenant)
    removed = register(tenant, "C1", OLD, "tech@example.com")
    malformed = register(tenant, "C2", OLD, "tech@example.com")
    moved = register(tenant, "C3", OLD, "tech@example.com")
    claim_and_prepare(tenant, [removed])
    with tenant_tx(tenant.slug) as tx:  # the host's own SQL, no register
        tx.conn.execute("DELETE FROM subject_fields WHERE subject_id = %s", [removed])
        tx.conn.execute("UPDATE subject_fields SET value = '\"31/12/2027\"' WHERE subject_id = %s",
                        [malformed])
    move_due(tenant, moved, NEW)
    assert run_scan(tenant.slug, AS_OF + timedelta(hours=1)).time.cancelled == 3
    assert old_date_rows(tenant, removed)[-1] == ("offset:-7", "cancelled", "due date removed")
    assert old_date_rows(tenant, malformed)[-1] == ("offset:-7", "cancelled", "due date removed")
    assert old_date_rows(tenant, moved)[-1] == ("offset:-7", "cancelled", MOVED)
    assert deliveries_of(tenant, removed) == [("cancelled", "due date removed", 0)]
    assert unarchived(tenant, removed) == 0


def test_a_cancel_committed_between_enqueue_and_send_stops_the_email(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    add_metrology(tenant)
    add_person(tenant, "tech@example.com")
    add_time_rule(tenant)
    subject = register(tenant, "C1", OLD, "tech@example.com")
    emails = claim_and_prepare(tenant, [subject])
    assert len(emails) == 1 and scalar(tenant, "SELECT enqueued_at IS NOT NULL FROM "
                                               "notification_deliveries WHERE id = %s", emails[0])
    send_events(tenant, certificate_event("C1", **{DUE_FIELD: NEW.isoformat()}))  # commits
    deliver_email.send(tenant.slug, *emails)  # the message enqueued before the move arrives
    worker.drain()
    assert ses.sent() == []
    assert deliveries_of(tenant, subject) == [("cancelled", MOVED, 0)]


def test_the_sender_refuses_a_notice_whose_date_moved_after_its_message_was_enqueued(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    """A host's table write (no register) after the enqueue, no scan since: the sender's
    own last-moment check finds the claim's date no longer holds."""
    add_metrology(tenant)
    add_person(tenant, "tech@example.com")
    add_time_rule(tenant)
    moved, removed, kept = (register(tenant, f"C{n}", OLD, "tech@example.com") for n in (1, 2, 3))
    emails = claim_and_prepare(tenant, [moved, removed, kept])
    move_due(tenant, moved, NEW)
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("DELETE FROM subject_fields WHERE subject_id = %s", [removed])
    deliver_email.send(tenant.slug, *emails)
    worker.drain()
    assert [e.to for e in ses.sent()] == ["tech@example.com"]  # the one whose date holds
    assert deliveries_of(tenant, moved) == [("cancelled", MOVED, 0)]
    assert deliveries_of(tenant, removed) == [("cancelled", "due date removed", 0)]
    assert deliveries_of(tenant, kept)[0][0] == "accepted"


def test_the_sender_refuses_a_notice_whose_claim_was_cancelled_before_the_claim(tenant: Tenant) -> None:
    """The claim's verdict reads the ledger row as committed when the delivery is locked."""
    add_metrology(tenant)
    add_person(tenant, "tech@example.com")
    add_time_rule(tenant)
    subject = register(tenant, "C1", OLD, "tech@example.com")
    [email] = claim_and_prepare(tenant, [subject])
    with tenant_tx(tenant.slug) as tx:  # e.g. an operator cancelling the notice
        tx.conn.execute("UPDATE notification_ledger SET status = 'cancelled' WHERE subject_id = %s "
                        "AND status = 'claimed'", [subject])
    with tenant_tx(tenant.slug) as tx:
        [settled] = claim_deliveries(tx, [email], 300)
    assert (settled.action, settled.reason) == ("cancelled", "notification cancelled before the send")  # type: ignore[union-attr]
    assert deliveries_of(tenant, subject) == [("cancelled", "notification cancelled before the send", 0)]
