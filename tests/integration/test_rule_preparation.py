"""Preparing rule notices (db/notices/rule_notices.py) over real Postgres: recipients bound late,
preferences and channels applied by the licence's statement, a refused template replaced
by the default one and listed on Needs attention, other failures recorded in a fresh
transaction and shown there too, and the actor on a product's own queue
run by a real worker."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest

from actors.prepare import prepare_notices
from db.evidence.ledger_view import defaulted_notices, failed_preparations
from db.notices.rule_notices import (
    PreparationFailed,
    PreparedReport,
    prepare_rule_claims,
    record_preparation_failure,
    unprepared_rule_claims,
)
from db.people.members import list_members
from db.people.preferences import save_schedule, save_user_preference, set_channel
from db.people.users import authenticate, set_password
from db.platform.effects import AnnounceInbox, PrepareClaims
from db.platform.tenancy import Tenant, tenant_tx
from domain.delivery.preferences import OPTED_OUT, Channel, Frequency, Preference
from domain.delivery.quiet_hours import QuietHours
from domain.errors import InvalidInput, NotFound
from domain.people.identity import Role, valid_role
from tests.integration.builders import PASSWORD, scalar
from tests.integration.conftest import RunningWorker, SesOutbox, wait_until
from tests.integration.platform_builders import (
    add_person,
    add_product,
    add_rule,
    add_subject,
    add_unit,
    fire,
    reassign,
)
from tocsin.core import runtime

ASSIGNEES = [{"type": "assignees"}]
UNRESOLVABLE = [{"type": "nobody"}]  # a recipient preparation cannot resolve (saved before validation)
LOOPS_FOREVER = "{% for i in (1..100000000) %}{{ i }}{% endfor %}"


def prepare(tenant: Tenant, *ledger_ids: int, now: datetime | None = None) -> PreparedReport:
    with tenant_tx(tenant.slug) as tx:
        return prepare_rule_claims(tx, list(ledger_ids), now)


def notices(tenant: Tenant) -> list[tuple[int, str, str, bool]]:
    """(recipient, title, body, visible in the inbox) per notification, by recipient."""
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute(
            "SELECT recipient_user_id, title, body, archived_at IS NULL FROM notifications "
            "ORDER BY recipient_user_id"
        ).fetchall()
    return [(int(str(r[0])), str(r[1]), str(r[2]), bool(r[3])) for r in rows]


def recipients(tenant: Tenant) -> list[int]:
    return [n[0] for n in notices(tenant)]


def emails(tenant: Tenant) -> dict[int, tuple[str, str | None, datetime]]:
    """recipient -> (status, reason, send_after) of their email delivery."""
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute(
            "SELECT n.recipient_user_id, d.status, d.status_reason, d.send_after "
            "FROM notification_deliveries d JOIN notifications n ON n.id = d.notification_id "
            "WHERE d.channel = 'email'"
        ).fetchall()
    return {int(str(r[0])): (str(r[1]), None if r[2] is None else str(r[2]), r[3]) for r in rows}  # type: ignore[misc]


def test_a_subject_reassigned_after_the_claim_tells_the_new_assignee_only(tenant: Tenant) -> None:
    product = add_product(tenant)
    old, new = add_person(tenant, "old@example.com"), add_person(tenant, "new@example.com")
    subject = add_subject(tenant, product, "C-1042", title="Card fraud", assignees=[old],
                          fields={"amount": 1500000})
    rule = add_rule(tenant, product, "Large case", recipients=ASSIGNEES,
                    title="{{ rule.name }}: {{ subject.external_id }}",
                    body="{{ subject.title }} for {{ field.amount }}")
    claim = fire(tenant, rule, subject)
    reassign(tenant, subject, [new])  # after the rule fired, before preparation

    report = prepare(tenant, claim)

    assert report.prepared == [claim]
    assert notices(tenant) == [(new, "Large case: C-1042", "Card fraud for 1500000", True)]
    assert set(emails(tenant)) == {new}
    assert scalar(tenant, "SELECT prepared_at IS NOT NULL FROM notification_ledger WHERE id = %s", claim)


def test_a_deactivated_assignee_is_skipped(tenant: Tenant) -> None:
    product = add_product(tenant)
    gone, here = add_person(tenant, "gone@example.com"), add_person(tenant, "here@example.com")
    subject = add_subject(tenant, product, "C-7", assignees=[gone, here])
    claim = fire(tenant, add_rule(tenant, product, "Any case", recipients=ASSIGNEES), subject)
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE users SET deactivated_at = now() WHERE id = %s", [gone])

    prepare(tenant, claim)

    assert recipients(tenant) == [here]


def test_roles_heads_named_users_and_fixed_addresses_are_resolved_and_merged(tenant: Tenant) -> None:
    product = add_product(tenant)
    officer = add_person(tenant, "officer@example.com")
    admin = add_person(tenant, "boss@example.com", Role.ADMIN)
    head = add_person(tenant, "head.north@example.com")
    named = add_person(tenant, "named@example.com")
    add_person(tenant, "bystander@example.com")
    add_person(tenant, "head.south@example.com")
    north = add_unit(tenant, "region", "north", head)
    add_unit(tenant, "region", "south", scalar(tenant, "SELECT id FROM users WHERE email = %s",
                                               "head.south@example.com"))
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("INSERT INTO role_holders (role, user_id) VALUES ('compliance_officer', %s)",
                        [officer])
    # The head is also an assignee and named twice: told once.
    subject = add_subject(tenant, product, "C-9", assignees=[head], units={"region": north})
    rule = add_rule(tenant, product, "Everyone", recipients=[
        {"type": "assignees"}, {"type": "role", "role": "compliance_officer"},
        {"type": "role", "role": "admin"}, {"type": "head", "level": "region"},
        {"type": "user", "email": "Named@Example.com"}, {"type": "user", "email": "head.north@example.com"},
        {"type": "address", "email": "Auditor@Outside.example"},
    ])

    prepare(tenant, fire(tenant, rule, subject))

    contact = scalar(tenant, "SELECT id FROM users WHERE email = 'auditor@outside.example'")
    assert recipients(tenant) == sorted([officer, admin, head, named, contact])
    assert set(emails(tenant)) == {officer, admin, head, named, contact}
    # The contact has no inbox to read: its row is hidden, its email goes out.
    assert [visible for user, _, _, visible in notices(tenant) if user == contact] == [False]


def test_a_fixed_address_of_an_existing_person_reaches_that_person(tenant: Tenant) -> None:
    product = add_product(tenant)
    person = add_person(tenant, "known@example.com")
    subject = add_subject(tenant, product, "C-10")
    rule = add_rule(tenant, product, "Known", recipients=[{"type": "address", "email": "KNOWN@example.com"}])

    prepare(tenant, fire(tenant, rule, subject))

    assert recipients(tenant) == [person]
    assert scalar(tenant, "SELECT count(*) FROM users WHERE role = 'contact'") == 0


def test_a_contact_never_signs_in_is_never_listed_and_is_never_made_by_hand(tenant: Tenant) -> None:
    product = add_product(tenant)
    subject = add_subject(tenant, product, "C-11")
    rule = add_rule(tenant, product, "External",
                    recipients=[{"type": "address", "email": "ext@outside.example"}])
    prepare(tenant, fire(tenant, rule, subject))
    contact = scalar(tenant, "SELECT id FROM users WHERE email = 'ext@outside.example'")

    with tenant_tx(tenant.slug) as tx:
        assert scalar(tenant, "SELECT role FROM users WHERE id = %s", contact) == "contact"
        assert authenticate(tx, "ext@outside.example", PASSWORD) is None
        assert contact not in {m.id for m in list_members(tx)}
        with pytest.raises(NotFound):
            set_password(tx, contact, PASSWORD)
    with pytest.raises(InvalidInput):
        valid_role("contact")
    with pytest.raises(Exception, match="users_contact_without_password"), tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE users SET password_hash = 'x' WHERE id = %s", [contact])


def test_an_email_opt_out_cancels_the_email_and_keeps_the_inbox_row(tenant: Tenant) -> None:
    product = add_product(tenant)
    user = add_person(tenant, "quiet@example.com")
    with tenant_tx(tenant.slug) as tx:
        set_channel(tx, user, "case_alert", Channel.EMAIL, False)
    claim = fire(tenant, add_rule(tenant, product, "Alert", recipients=ASSIGNEES),
                 add_subject(tenant, product, "C-12", assignees=[user]))

    report = prepare(tenant, claim)

    assert emails(tenant)[user][:2] == ("cancelled", OPTED_OUT)
    assert [n[3] for n in notices(tenant)] == [True]
    assert report.emails == []


def test_a_digest_reader_gets_the_email_batched_for_the_digest(tenant: Tenant) -> None:
    product = add_product(tenant)
    user = add_person(tenant, "digest@example.com")
    with tenant_tx(tenant.slug) as tx:
        save_user_preference(tx, user, "case_update", Preference(True, True, Frequency.DAILY_DIGEST))
    claim = fire(tenant, add_rule(tenant, product, "Update", recipients=ASSIGNEES, category="case_update"),
                 add_subject(tenant, product, "C-24", assignees=[user]))

    report = prepare(tenant, claim)

    assert emails(tenant)[user][0] == "batched"
    assert scalar(tenant, "SELECT batch_period FROM notification_deliveries") == "daily"
    assert scalar(tenant, "SELECT category FROM notifications") == "case_update"
    assert report.emails == []


def test_quiet_hours_defer_the_email_unless_the_rule_is_critical(tenant: Tenant) -> None:
    product = add_product(tenant)
    sleeper, on_call = add_person(tenant, "sleeper@example.com"), add_person(tenant, "oncall@example.com")
    with tenant_tx(tenant.slug) as tx:
        for user in (sleeper, on_call):
            save_schedule(tx, user, quiet=QuietHours(time(22, 0), time(7, 0)), digest_time=time(8, 0),
                          weekly_day=1, zone="Europe/London")
    night = datetime(2027, 1, 5, 23, 0, tzinfo=UTC)  # 23:00 in London
    subject = add_subject(tenant, product, "C-13", assignees=[sleeper])
    critical_subject = add_subject(tenant, product, "C-14", assignees=[on_call])
    ordinary = fire(tenant, add_rule(tenant, product, "Ordinary", recipients=ASSIGNEES), subject)
    urgent = fire(tenant, add_rule(tenant, product, "Urgent", recipients=ASSIGNEES, critical=True),
                  critical_subject)

    report = prepare(tenant, ordinary, urgent, now=night)

    status, _, send_after = emails(tenant)[sleeper]
    assert (status, send_after) == ("deferred", datetime(2027, 1, 6, 7, 0, tzinfo=UTC))
    assert emails(tenant)[on_call][0] == "pending"
    assert report.emails == [scalar(tenant, "SELECT d.id FROM notification_deliveries d JOIN notifications n "
                                            "ON n.id = d.notification_id WHERE n.recipient_user_id = %s",
                                    on_call)]


def test_the_rules_channels_decide_inbox_and_email(tenant: Tenant) -> None:
    product = add_product(tenant)
    inbox_only, email_only = add_person(tenant, "inbox@example.com"), add_person(tenant, "mail@example.com")
    in_app = fire(tenant, add_rule(tenant, product, "Inbox only", recipients=ASSIGNEES, channels=("in_app",)),
                  add_subject(tenant, product, "C-15", assignees=[inbox_only]))
    email = fire(tenant, add_rule(tenant, product, "Email only", recipients=ASSIGNEES, channels=("email",)),
                 add_subject(tenant, product, "C-16", assignees=[email_only]))

    with tenant_tx(tenant.slug) as tx:
        prepare_rule_claims(tx, [in_app, email])
        announced = tx.pending(AnnounceInbox)
        told_in_app = announced.user_ids if announced else set()

    assert set(emails(tenant)) == {email_only}
    assert emails(tenant)[email_only][0] == "pending"
    assert {user: visible for user, _, _, visible in notices(tenant)} == {inbox_only: True, email_only: False}
    assert told_in_app == {inbox_only}


def test_preparing_twice_writes_one_of_each(tenant: Tenant) -> None:
    product = add_product(tenant)
    user = add_person(tenant, "once@example.com")
    claim = fire(tenant, add_rule(tenant, product, "Once", recipients=ASSIGNEES),
                 add_subject(tenant, product, "C-17", assignees=[user]))

    first = prepare(tenant, claim)
    again = prepare(tenant, claim)
    # Even when the claim is found unprepared again (a crash between commit and mark), the
    # notices are keyed by (claim, recipient): nothing is written twice.
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE notification_ledger SET prepared_at = NULL WHERE id = %s", [claim])
    forced = prepare(tenant, claim)

    assert (first.prepared, again.prepared, again.skipped, forced.prepared) == ([claim], [], [claim], [claim])
    assert scalar(tenant, "SELECT count(*) FROM notifications") == 1
    assert scalar(tenant, "SELECT count(*) FROM notification_deliveries") == 1
    assert forced.emails == []


def test_a_refused_template_sends_the_default_text_and_is_listed_on_needs_attention(tenant: Tenant) -> None:
    product = add_product(tenant)
    user = add_person(tenant, "nobody@example.com")
    rule = add_rule(tenant, product, "Broken template", recipients=ASSIGNEES, body=LOOPS_FOREVER)
    subject = add_subject(tenant, product, "C-18", title="A case", assignees=[user])
    claim = fire(tenant, rule, subject)

    report = prepare(tenant, claim)  # no exception, no retry: the template would be refused again

    assert report.prepared == [claim]
    ((recipient, title, body, visible),) = notices(tenant)
    assert (recipient, title, visible) == (user, "Case C-18", True)  # the rule's own title rendered
    assert 'The rule "Broken template" fired for' in body and "C-18 (A case)" in body
    with tenant_tx(tenant.slug) as tx:
        (listed,) = defaulted_notices(tx)
        assert failed_preparations(tx) == []
    assert (listed.ledger_id, listed.rule_name, listed.subject_title) == (claim, "Broken template", "A case")
    assert "body template was refused: range limit reached" in listed.error
    assert "the default body was sent instead" in listed.error
    assert prepare(tenant, claim).skipped == [claim]  # prepared once, like any other


def test_a_refused_title_and_body_both_fall_back(tenant: Tenant) -> None:
    product = add_product(tenant)
    user = add_person(tenant, "both@example.com")
    rule = add_rule(tenant, product, "Both broken", recipients=ASSIGNEES, title="{{ 1 | divided_by: 0 }}",
                    body="{% for a in (1..800) %}{% endfor %}{% for b in (1..800) %}{% endfor %}")
    claim = fire(tenant, rule, add_subject(tenant, product, "C-22", title="T", assignees=[user]))

    assert prepare(tenant, claim).prepared == [claim]

    ((_, title, body, _),) = notices(tenant)
    assert title.startswith("Both broken:") and "C-22" in title and "Both broken" in body
    error = scalar(tenant, "SELECT prepare_error FROM notification_ledger WHERE id = %s", claim)
    assert "title template was refused" in error
    assert "body template was refused: loop iteration limit" in error


def test_editing_the_rule_takes_its_defaulted_notices_off_the_list(tenant: Tenant) -> None:
    product = add_product(tenant)
    user = add_person(tenant, "edit@example.com")
    rule = add_rule(tenant, product, "To fix", recipients=ASSIGNEES, title=LOOPS_FOREVER)
    prepare(tenant, fire(tenant, rule, add_subject(tenant, product, "C-23", assignees=[user])))
    with tenant_tx(tenant.slug) as tx:
        assert len(defaulted_notices(tx)) == 1
        tx.conn.execute("UPDATE rules SET version = version + 1 WHERE id = %s", [rule])
        assert defaulted_notices(tx) == []


def test_one_broken_claim_fails_the_batch_and_names_itself(tenant: Tenant) -> None:
    product = add_product(tenant)
    user = add_person(tenant, "batch@example.com")
    good = fire(tenant, add_rule(tenant, product, "Good", recipients=ASSIGNEES),
                add_subject(tenant, product, "C-19", assignees=[user]))
    bad = fire(tenant, add_rule(tenant, product, "Bad", recipients=UNRESOLVABLE),
               add_subject(tenant, product, "C-20", assignees=[user]))

    with pytest.raises(PreparationFailed) as failed:
        prepare(tenant, good, bad)

    assert failed.value.ledger_id == bad
    assert scalar(tenant, "SELECT count(*) FROM notifications") == 0  # the good one rolled back too
    record_preparation_failure(tenant.slug, bad, failed.value.reason, max_attempts=1)
    assert prepare(tenant, good, bad).prepared == [good]  # given up on: the rest goes through


def test_a_claim_that_cannot_be_prepared_is_recorded_in_a_fresh_transaction(tenant: Tenant) -> None:
    product = add_product(tenant)
    rule = add_rule(tenant, product, "No such recipient", recipients=UNRESOLVABLE)
    claim = fire(tenant, rule, add_subject(tenant, product, "C-18", title="A case"))
    bound = 3

    for attempt in range(1, bound + 1):
        with pytest.raises(PreparationFailed) as failed:
            prepare(tenant, claim)
        assert failed.value.ledger_id == claim
        assert "unknown recipient type" in failed.value.reason
        recorded = record_preparation_failure(tenant.slug, claim, failed.value.reason, max_attempts=bound)
        assert recorded is not None and (recorded.attempts, recorded.gave_up) == (attempt, attempt == bound)
        if attempt < bound:
            with tenant_tx(tenant.slug) as tx:
                assert failed_preparations(tx) == []

    assert scalar(tenant, "SELECT count(*) FROM notifications") == 0
    assert scalar(tenant, "SELECT prepared_at IS NULL FROM notification_ledger WHERE id = %s", claim)
    with tenant_tx(tenant.slug) as tx:
        (listed,) = failed_preparations(tx)
    assert (listed.ledger_id, listed.rule_name, listed.subject_title, listed.attempts) == (
        claim, "No such recipient", "A case", bound)
    assert listed.error is not None and "unknown recipient type" in listed.error
    # Given up: later preparations leave it alone instead of failing again.
    assert prepare(tenant, claim).skipped == [claim]


def test_the_actor_records_the_failure_and_raises_for_a_retry(tenant: Tenant) -> None:
    product = add_product(tenant)
    claim = fire(tenant, add_rule(tenant, product, "Broken", recipients=UNRESOLVABLE),
                 add_subject(tenant, product, "C-21"))

    with pytest.raises(PreparationFailed):
        prepare_notices(tenant.slug, [claim])

    attempts, error = scalar(tenant, "SELECT array[prepare_attempts::text, prepare_error] "
                                     "FROM notification_ledger WHERE id = %s", claim)
    assert int(attempts) == 1 and "unknown recipient type" in error
    assert runtime.settings().prepare_max_attempts == 5


def test_a_worker_prepares_a_claim_sent_to_its_products_queue(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    product = add_product(tenant)
    user = add_person(tenant, "worker@example.com")
    claim = fire(tenant, add_rule(tenant, product, "Queued", recipients=ASSIGNEES,
                                  title="Case {{ subject.external_id }} opened"),
                 add_subject(tenant, product, "C-22", assignees=[user]))

    with tenant_tx(tenant.slug) as tx:  # what the evaluation's transaction asks for
        tx.after_commit(PrepareClaims([(product, claim)]))  # carried out once it commits

    assert "prepare_fraud" in worker.broker.get_declared_queues()
    wait_until(lambda: any(e.to == "worker@example.com" for e in ses.sent()), "the rule's email")
    (sent,) = [e for e in ses.sent() if e.to == "worker@example.com"]
    assert sent.subject == "Case C-22 opened"
    assert scalar(tenant, "SELECT prepared_at IS NOT NULL FROM notification_ledger WHERE id = %s", claim)


def test_send_time_honours_a_critical_rule_in_quiet_hours(tenant: Tenant) -> None:
    from db.delivery.deliveries import ClaimedEmail, claim_deliveries

    product = add_product(tenant)
    user = add_person(tenant, "critical@example.com")
    with tenant_tx(tenant.slug) as tx:
        save_schedule(tx, user, quiet=QuietHours(time(0, 0), time(23, 59)), digest_time=time(8, 0),
                      weekly_day=1, zone="UTC")
    now = datetime(2027, 1, 5, 12, 0, tzinfo=UTC)
    urgent = fire(tenant, add_rule(tenant, product, "Urgent", recipients=ASSIGNEES, critical=True),
                  add_subject(tenant, product, "C-23", assignees=[user]))
    prepare(tenant, urgent, now=now)
    delivery = scalar(tenant, "SELECT id FROM notification_deliveries")

    with tenant_tx(tenant.slug) as tx:  # the claim re-checks the preference: sent, not deferred
        [claim] = claim_deliveries(tx, [delivery], 60, now + timedelta(minutes=1))

    assert isinstance(claim, ClaimedEmail)


def test_claims_left_unprepared_are_found_for_the_sweeper(tenant: Tenant) -> None:
    product = add_product(tenant)
    user = add_person(tenant, "sweep@example.com")
    rule = add_rule(tenant, product, "Swept", recipients=ASSIGNEES)
    lost, done, fresh = (fire(tenant, rule, add_subject(tenant, product, f"C-3{n}", assignees=[user]))
                         for n in range(3))
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE notification_ledger SET claimed_at = now() - interval '10 minutes' "
                        "WHERE id IN (%s, %s)", [lost, done])
    prepare(tenant, done)

    with tenant_tx(tenant.slug) as tx:
        assert unprepared_rule_claims(tx, older_than_seconds=60) == 1
        assert tx.pending(PrepareClaims) == PrepareClaims([(product, lost)])  # queued after commit
    with tenant_tx(tenant.slug) as tx:
        unprepared_rule_claims(tx, older_than_seconds=0)
        assert (product, fresh) in tx.pending(PrepareClaims).claims  # type: ignore[union-attr]


def test_the_actor_prepares_the_rest_of_its_message_and_counts_an_attempt_for_each_broken_claim(
        tenant: Tenant) -> None:
    product = add_product(tenant)
    user = add_person(tenant, "rest@example.com")
    broken_rule = add_rule(tenant, product, "Broken", recipients=UNRESOLVABLE)
    good_rule = add_rule(tenant, product, "Good", recipients=ASSIGNEES)
    first_bad = fire(tenant, broken_rule, add_subject(tenant, product, "C-30", assignees=[user]))
    good = fire(tenant, good_rule, add_subject(tenant, product, "C-31", assignees=[user]))
    second_bad = fire(tenant, broken_rule, add_subject(tenant, product, "C-32", assignees=[user]))

    with pytest.raises(PreparationFailed) as failed:
        prepare_notices(tenant.slug, [first_bad, good, second_bad])

    assert failed.value.ledger_id == first_bad  # the retry comes for the first that failed
    attempts = dict(scalar(tenant, "SELECT array_agg(array[id, prepare_attempts]) FROM notification_ledger "
                                   "WHERE id = ANY(%s)", [first_bad, good, second_bad]))
    assert attempts == {first_bad: 1, good: 0, second_bad: 1}  # one attempt each, this run
    assert scalar(tenant, "SELECT prepared_at IS NOT NULL FROM notification_ledger WHERE id = %s", good)
    assert scalar(tenant, "SELECT count(*) FROM notifications") == 1  # the good claim's notice
    with pytest.raises(PreparationFailed):  # Dramatiq's retry: the good one is skipped
        prepare_notices(tenant.slug, [first_bad, good, second_bad])
    assert scalar(tenant, "SELECT count(*) FROM notifications") == 1
    assert scalar(tenant, "SELECT sum(prepare_attempts) FROM notification_ledger WHERE id = ANY(%s)",
                  [first_bad, second_bad]) == 4
