"""Time rules when things change: a due date moved after a reminder was claimed, a
turnaround breached once (and not at all when the status changed in time), a rule edited
while scans run, and the claims prepared and sent through the rules' own path."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta

from db.notices.rule_notices import prepare_rule_claims
from db.notices.scan import run_scan
from db.platform.effects import PrepareClaims
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.calendar import load_calendar
from db.rules.time_rules import _claim_due, claim_time_rules, time_rules
from tests.integration.builders import scalar, scan_concurrently
from tests.integration.conftest import RunningWorker, SesOutbox
from tests.integration.platform_builders import add_person
from tests.integration.time_rule_support import (
    add_certificate,
    add_metrology,
    add_time_rule,
    edit_time_rule,
    keys_once,
    move_due,
    outcomes,
    rule_ledger,
    set_status,
    time_rule,
)

AS_OF = datetime(2027, 6, 1, 12, 0, tzinfo=UTC)
TODAY = AS_OF.date()


def prepare_all(tenant: Tenant) -> None:
    with tenant_tx(tenant.slug) as tx:
        ids = [r["id"] for r in rule_ledger(tenant) if r["status"] == "claimed"]
        prepare_rule_claims(tx, ids)


def deliveries(tenant: Tenant) -> list[tuple[str, str | None, str]]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute(
            "SELECT d.status, d.status_reason, l.threshold FROM notification_deliveries d "
            "JOIN notifications n ON n.id = d.notification_id "
            "JOIN notification_ledger l ON l.id = n.ledger_id ORDER BY d.id").fetchall()
    return [(str(r[0]), None if r[1] is None else str(r[1]), str(r[2])) for r in rows]


def test_a_moved_due_date_cancels_the_old_date_s_waiting_notices_and_starts_a_new_cycle(
    tenant: Tenant
) -> None:
    add_metrology(tenant)
    person = add_person(tenant, "tech@example.com")
    add_time_rule(tenant)
    old, new = TODAY + timedelta(days=5), TODAY + timedelta(days=20)
    subject = add_certificate(tenant, "C1", old, assignees=(person,))
    unprepared = add_certificate(tenant, "C2", old, assignees=(person,))
    run_scan(tenant.slug, AS_OF)
    with tenant_tx(tenant.slug) as tx:  # C1's reminder prepared: its email waits to be sent
        prepare_rule_claims(tx, [r["id"] for r in rule_ledger(tenant)
                                 if r["subject_id"] == subject and r["status"] == "claimed"])
    assert deliveries(tenant) == [("pending", None, "offset:-7")]

    move_due(tenant, subject, new)
    move_due(tenant, unprepared, new)
    report = run_scan(tenant.slug, AS_OF + timedelta(hours=1))

    reason = f"due date moved from {old.isoformat()} to {new.isoformat()}"
    assert report.time.cancelled == 2
    rows = rule_ledger(tenant)
    for s in (subject, unprepared):
        old_rows = [(r["threshold"], r["status"], r["status_reason"]) for r in rows
                    if r["subject_id"] == s and r["due_on"] == old]
        assert old_rows == [("offset:-30", "skipped", "a later milestone's window had begun"),
                            ("offset:-7", "cancelled", reason)]
        assert [(r["threshold"], r["status"]) for r in rows if r["subject_id"] == s and r["due_on"] == new] \
            == [("offset:-30", "claimed")]
    assert deliveries(tenant) == [("cancelled", reason, "offset:-7")]
    assert scalar(tenant, "SELECT count(*) FROM notifications WHERE archived_at IS NULL") == 0
    # Moving it back is a new occurrence of the old date only for what has not been claimed.
    assert run_scan(tenant.slug, AS_OF + timedelta(hours=2)).time.cancelled == 0
    assert keys_once(tenant)


def test_a_sent_reminder_is_not_cancelled_when_the_date_moves(tenant: Tenant) -> None:
    add_metrology(tenant)
    person = add_person(tenant, "tech@example.com")
    add_time_rule(tenant, time_rule(actions={**time_rule()["actions"], "channels": ["in_app"]}))
    old = TODAY + timedelta(days=5)
    subject = add_certificate(tenant, "C1", old, assignees=(person,))
    run_scan(tenant.slug, AS_OF)
    prepare_all(tenant)  # in the inbox: delivered there
    move_due(tenant, subject, TODAY + timedelta(days=60))
    assert run_scan(tenant.slug, AS_OF + timedelta(hours=1)).time.cancelled == 0
    assert ("offset:-7", "claimed") in {(r["threshold"], r["status"]) for r in rule_ledger(tenant)
                                        if r["due_on"] == old}


def tat_rule(**turnaround: object) -> dict[str, object]:
    return time_rule(name="Open too long", trigger={"subject_kind": "certificate", "turnaround": {
        "after": "created", **(turnaround or {"hours": 48})}},
        conditions={"all": [{"fact": "subject.status", "op": "equals", "value": "open"}]})


def test_a_turnaround_breach_is_claimed_once_per_occurrence(tenant: Tenant) -> None:
    add_metrology(tenant)
    rule = add_time_rule(tenant, tat_rule())
    created = datetime(2027, 6, 1, 9, 0, tzinfo=UTC)
    subject = add_certificate(tenant, "C1", None, created_at=created)

    assert run_scan(tenant.slug, created + timedelta(hours=47, minutes=59)).time.claimed == 0
    reports = [run_scan(tenant.slug, created + timedelta(hours=48, minutes=m)) for m in (0, 15, 600)]
    errors = scan_concurrently(tenant, created + timedelta(hours=49), 8)

    assert errors == [] and [r.time.claimed for r in reports] == [1, 0, 0]
    threshold = f"tat:created:{int(created.timestamp())}"
    assert outcomes(tenant) == {(subject, threshold, date(2027, 6, 3), "claimed")}
    assert rule_ledger(tenant)[0]["rule_id"] == rule


def test_no_breach_when_the_status_changed_in_time(tenant: Tenant) -> None:
    add_metrology(tenant)
    add_time_rule(tenant, tat_rule())
    created = datetime(2027, 6, 1, 9, 0, tzinfo=UTC)
    subject = add_certificate(tenant, "C1", None, created_at=created)
    run_scan(tenant.slug, created + timedelta(hours=24))
    set_status(tenant, subject, "in_review", created + timedelta(hours=30))
    for hours in (48, 49, 200):
        run_scan(tenant.slug, created + timedelta(hours=hours))
    assert rule_ledger(tenant) == []


def test_a_turnaround_in_working_days_waits_over_the_weekend(tenant: Tenant) -> None:
    add_metrology(tenant)
    add_time_rule(tenant, tat_rule(days=1, business_days=True))
    created = datetime(2027, 6, 4, 15, 0, tzinfo=UTC)  # Friday 16:00 in London
    add_certificate(tenant, "C1", None, created_at=created)
    for day in (5, 6):  # Saturday, Sunday
        run_scan(tenant.slug, datetime(2027, 6, day, 18, 0, tzinfo=UTC))
    run_scan(tenant.slug, datetime(2027, 6, 7, 14, 59, tzinfo=UTC))
    assert rule_ledger(tenant) == []
    run_scan(tenant.slug, datetime(2027, 6, 7, 15, 0, tzinfo=UTC))  # Monday 16:00
    assert [(r["status"], r["due_on"]) for r in rule_ledger(tenant)] == [("claimed", date(2027, 6, 7))]


def test_a_rule_edited_between_reading_and_claiming_claims_nothing_stale(tenant: Tenant) -> None:
    add_metrology(tenant)
    rule_id = add_time_rule(tenant)
    add_certificate(tenant, "C1", TODAY + timedelta(days=7))
    with tenant_tx(tenant.slug) as tx:
        [rule] = time_rules(tx)  # the scan has read version 1 ...
        # ... and an admin saves version 2 (offsets changed) before the claim runs.
        edited = time_rule(trigger={"subject_kind": "certificate", "due": {
            "fact": "field.calibration_due", "offsets": [-14, -7, 0]}})
        other = threading.Thread(target=edit_time_rule, args=(tenant, rule_id, edited))
        other.start()
        other.join()
        assert _claim_due(tx, rule, AS_OF, load_calendar(tx), []) == ([], 0)  # version 1 is gone
    run_scan(tenant.slug, AS_OF)
    assert {(r["threshold"], r["status"], r["rule_version"]) for r in rule_ledger(tenant)} == {
        ("offset:-14", "skipped", 2), ("offset:-7", "claimed", 2)}


def test_rule_edits_while_scans_run_never_double_claim(tenant: Tenant) -> None:
    add_metrology(tenant)
    rule_id = add_time_rule(tenant)
    for n in range(-3, 31):
        add_certificate(tenant, f"C{n}", TODAY + timedelta(days=n))
    stop = threading.Event()
    versions: list[int] = []

    def edit() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            title = f"v{n}: {{{{ subject.title }}}} due {{{{ due.date }}}}"
            actions = {**time_rule()["actions"], "template": {"title": title, "body": "b"}}
            versions.append(edit_time_rule(tenant, rule_id, time_rule(actions=actions)))

    editor = threading.Thread(target=edit)
    editor.start()
    try:
        for minutes in range(0, 60, 10):
            assert scan_concurrently(tenant, AS_OF + timedelta(minutes=minutes), 4) == []
    finally:
        stop.set()
        editor.join()
    run_scan(tenant.slug, AS_OF + timedelta(hours=2))
    assert keys_once(tenant)
    rows = rule_ledger(tenant)
    assert len([r for r in rows if r["status"] == "claimed"]) == 34  # one window each
    with tenant_tx(tenant.slug) as tx:
        known = {int(str(v[0])) for v in tx.conn.execute(
            "SELECT version FROM rule_versions WHERE rule_id = %s", [rule_id]).fetchall()}
    assert {r["rule_version"] for r in rows} <= known and len(versions) > 0


def test_time_claims_are_prepared_and_sent_through_the_rules_path(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    add_metrology(tenant)
    person = add_person(tenant, "tech@example.com")
    add_time_rule(tenant)
    due = TODAY + timedelta(days=7)
    add_certificate(tenant, "C1", due, assignees=(person,))
    for _ in range(3):
        run_scan(tenant.slug, AS_OF)
    worker.drain()
    sent = ses.sent()
    title = f"Certificate C1 due {due.isoformat()}"
    assert [(e.to, e.subject) for e in sent] == [("tech@example.com", title)]
    assert f"Offset -7 from {(due - timedelta(days=7)).isoformat()}." in sent[0].body
    assert all(r["prepared_at"] is not None for r in rule_ledger(tenant) if r["status"] == "claimed")


def test_the_sweeper_prepares_time_claims_whose_message_was_lost(tenant: Tenant) -> None:
    from db.notices.rule_notices import unprepared_rule_claims

    add_metrology(tenant)
    add_time_rule(tenant)
    add_certificate(tenant, "C1", TODAY + timedelta(days=7))
    with tenant_tx(tenant.slug) as tx:  # no after-commit listener here: the message is lost
        claim_time_rules(tx, AS_OF)
    with tenant_tx(tenant.slug) as tx:
        assert unprepared_rule_claims(tx, 0) == 1
        assert tx.pending(PrepareClaims) == PrepareClaims([("metrology", rule_ledger(tenant)[1]["id"])])
