"""The unknown-outcome policy of a tenant and a person's decisions on what it holds: an
administrator chooses resend or hold on the settings page (or with `tocsin tenant
unknown-outcome`); under hold, an email whose answer was lost and that no provider event
settled waits on Needs attention with two actions, "send again" (sent once more, with the
same Message-ID) and "mark as delivered" (nothing sent), each recorded with who and when."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from actors.email import deliver_email
from db.delivery.sweep import run_sweep
from db.platform.tenancy import get_tenant, tenant_tx
from tests.integration.builders import scalar
from tests.integration.conftest import RunningWorker, SesOutbox, use_settings
from tests.integration.portal_support import People, PortalClient, csrf_token, signed_in
from tests.support.faulty_ses import FaultySes
from tocsin.boot.cli import main as tocsin


def _choose_policy(portal: PortalClient, policy: str) -> None:
    page = portal.get("/settings")
    assert page.status_code == 200 and "When an email" in page.text
    answer = portal.post("/settings/unknown-outcome", follow_redirects=False,
                         data={"policy": policy, "_csrf_token": csrf_token(page.text)})
    assert answer.status_code == 303


def _held_after_a_lost_answer(people: People, faulty_ses: FaultySes) -> int:
    """The admin's own d7 reminder email: SES accepts it and the answer is lost; the sweep
    finds no provider event and, under hold, keeps it for a person."""
    faulty_ses.policy = lambda n: "drop" if n == 1 else "pass"
    delivery_id = int(scalar(people.tenant,
                             "SELECT d.id FROM notification_deliveries d JOIN notifications n "
                             "ON n.id = d.notification_id WHERE n.recipient_user_id = %s",
                             people.client_user.id))
    deliver_email(people.tenant.slug, delivery_id)
    use_settings(reconcile_window_seconds=0)
    assert run_sweep(people.tenant.slug).reconciled.held == 1
    return delivery_id


def _decide(portal: PortalClient, delivery_id: int, action: str) -> str:
    page = portal.get("/ledger/attention")
    answer = portal.post(f"/ledger/attention/deliveries/{delivery_id}/{action}",
                         data={"_csrf_token": csrf_token(page.text)}, follow_redirects=False)
    assert answer.status_code == 303
    return portal.get(answer.headers["location"]).text


def _reviews(people: People, delivery_id: int) -> list[tuple[str, int, int]]:
    with tenant_tx(people.tenant.slug) as tx:
        rows = tx.conn.execute("SELECT decision, decided_by, attempt_no FROM delivery_reviews "
                               "WHERE delivery_id = %s ORDER BY id", [delivery_id]).fetchall()
    return [(str(r[0]), int(str(r[1])), int(str(r[2]))) for r in rows]


def _status(people: People, delivery_id: int) -> str:
    return str(scalar(people.tenant, "SELECT status FROM notification_deliveries WHERE id = %s",
                      delivery_id))


def test_the_settings_page_sets_the_policy_and_says_what_each_choice_costs(
    portal: PortalClient, people: People
) -> None:
    signed_in(portal, people, people.admin)
    page = portal.get("/settings")
    assert "may get the same email twice" in page.text and "waits on" in page.text
    assert re.search(r'value="resend"\s+checked', page.text)
    _choose_policy(portal, "hold")
    assert get_tenant(people.tenant.slug).unknown_outcome_policy == "hold"
    assert re.search(r'value="hold"\s+checked', portal.get("/settings").text)


def test_a_held_delivery_sent_again_goes_once_more_with_its_message_id_and_the_decision_is_recorded(
    portal: PortalClient, people: People, faulty_ses: FaultySes, ses: SesOutbox, worker: RunningWorker
) -> None:
    signed_in(portal, people, people.admin)
    _choose_policy(portal, "hold")
    delivery_id = _held_after_a_lost_answer(people, faulty_ses)
    attention = portal.get("/ledger/attention").text
    assert "Waiting for your decision" in attention
    assert f"/ledger/attention/deliveries/{delivery_id}/send-again" in attention

    page = _decide(portal, delivery_id, "send-again")
    worker.drain()

    assert "Sent again: the email goes out once more" in page
    assert _status(people, delivery_id) == "accepted"
    copies = [m.message_id for m in ses.sent() if f"<delivery-{delivery_id}." in m.message_id]
    assert len(copies) == 2 and len(set(copies)) == 1  # the lost one and the resend: one Message-ID
    assert _reviews(people, delivery_id) == [("send_again", people.admin.id, 1)]
    # The ledger shows both attempts and the decision between them.
    ledger = portal.get("/ledger").text
    assert "Sent again by admin@tenant.example" in ledger


def test_a_held_delivery_marked_delivered_sends_nothing_and_settles_its_claim(
    portal: PortalClient, people: People, faulty_ses: FaultySes, ses: SesOutbox, worker: RunningWorker
) -> None:
    signed_in(portal, people, people.admin)
    _choose_policy(portal, "hold")
    delivery_id = _held_after_a_lost_answer(people, faulty_ses)

    page = _decide(portal, delivery_id, "mark-delivered")
    run_sweep(people.tenant.slug)
    worker.drain()

    assert "Marked as delivered" in page
    assert _status(people, delivery_id) == "delivered"
    assert scalar(people.tenant, "SELECT l.delivered_at IS NOT NULL FROM notification_ledger l "
                  "JOIN notifications n ON n.ledger_id = l.id JOIN notification_deliveries d "
                  "ON d.notification_id = n.id WHERE d.id = %s", delivery_id) is True
    assert Counter(m.message_id for m in ses.sent())[f"<delivery-{delivery_id}.{people.tenant.slug}@"
                                                      "tocsin.example>"] == 1
    assert _reviews(people, delivery_id) == [("mark_delivered", people.admin.id, 1)]
    assert "Marked as delivered by admin@tenant.example" in portal.get("/ledger").text


def test_a_second_decision_on_the_same_delivery_is_refused_and_changes_nothing(
    portal: PortalClient, people: People, faulty_ses: FaultySes, worker: RunningWorker
) -> None:
    signed_in(portal, people, people.admin)
    _choose_policy(portal, "hold")
    delivery_id = _held_after_a_lost_answer(people, faulty_ses)
    _decide(portal, delivery_id, "mark-delivered")

    page = _decide(portal, delivery_id, "send-again")

    assert "Someone else decided about that delivery first" in page
    assert _status(people, delivery_id) == "delivered"
    assert [r[0] for r in _reviews(people, delivery_id)] == ["mark_delivered"]


def test_only_administrators_decide_and_set_the_policy(
    portal: PortalClient, people: People, faulty_ses: FaultySes, worker: RunningWorker
) -> None:
    signed_in(portal, people, people.admin)
    _choose_policy(portal, "hold")
    delivery_id = _held_after_a_lost_answer(people, faulty_ses)
    portal.post("/logout", data={"_csrf_token": csrf_token(portal.get("/").text)})
    signed_in(portal, people, people.client_user)
    token = csrf_token(portal.get("/").text)

    assert portal.get("/settings").status_code == 404
    assert portal.post("/settings/unknown-outcome", data={"policy": "resend", "_csrf_token": token},
                       follow_redirects=False).status_code == 404
    assert portal.post(f"/ledger/attention/deliveries/{delivery_id}/send-again",
                       data={"_csrf_token": token}, follow_redirects=False).status_code == 404
    assert get_tenant(people.tenant.slug).unknown_outcome_policy == "hold"
    assert _status(people, delivery_id) == "unknown" and _reviews(people, delivery_id) == []


def test_the_cli_shows_and_sets_the_policy_with_its_trade_off(
    people: People, capsys: pytest.CaptureFixture[str]
) -> None:
    tocsin(["tenant", "unknown-outcome", people.tenant.slug])
    assert "unknown outcomes: resend" in capsys.readouterr().out
    tocsin(["tenant", "unknown-outcome", people.tenant.slug, "hold"])
    out = capsys.readouterr().out
    assert "unknown outcomes: hold (changed)" in out and "no duplicate" in out
    assert get_tenant(people.tenant.slug).unknown_outcome_policy == "hold"
    with pytest.raises(SystemExit) as refused:
        tocsin(["tenant", "unknown-outcome", people.tenant.slug, "maybe"])
    assert refused.value.code == 2
    assert "invalid choice: 'maybe'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as unknown:
        tocsin(["tenant", "unknown-outcome", "no-such-tenant", "hold"])
    assert unknown.value.code == 2
