"""SMS through the local SNS endpoint (moto), counted at the endpoint: one text per claim and
recipient, the provider's opt-out list and our STOP list honoured, the monthly spend cap
refusing with a recorded reason, preferences and quiet hours like email, critical notices
through."""

from __future__ import annotations

import json
import os
import urllib.request
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

import pytest

from actors.sms import _opt_out_list, deliver_sms
from actors.sweep import sweep_tenant
from db.delivery.sms_deliveries import claim_sms, mark_called, sweep_sms
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.notices.rule_notices import prepare_rule_claims
from db.people.preferences import save_schedule
from db.people.sms_settings import (
    month_spend,
    save_phone,
    set_sms_category,
    set_spend_cap,
    spend_cap,
    stop_texts,
)
from db.platform.tenancy import Tenant, tenant_tx
from domain.delivery.quiet_hours import QuietHours
from domain.delivery.sms import CAP_ABOVE_CEILING, CAP_MALFORMED, CAP_NEGATIVE, SMS_OFF
from domain.errors import InvalidInput
from domain.notices.licence import CATEGORY
from tests.integration.builders import add_client, scalar
from tests.integration.conftest import RunningWorker, SesOutbox, use_settings
from tests.integration.platform_builders import add_person, add_product, add_rule, add_subject, fire
from tocsin.core.clock import pinned

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)
PHONE = "+447400123456"
OPTED_OUT_AT_SNS = "+447400123499"  # the local endpoint reports numbers ending in 99 opted out


def _texts_at_endpoint() -> list[tuple[str, str]]:
    """(number, text) of every SMS the local SNS endpoint was asked to publish."""
    with urllib.request.urlopen(f"{os.environ['SES_ENDPOINT_URL']}/moto-api/data.json", timeout=10) as r:
        data = json.load(r)
    return [(m["phone_number"], m["message"]) for m in data.get("sns", {}).get("SMS", [])]


def _people(tenant: Tenant, phones: list[str], *, sms: bool = True) -> list[int]:
    """A client whose licence is due in a week, with one user per phone number, each with
    texts on (or off) for the licence category."""
    _, users = add_client(tenant, AS_OF.date() + timedelta(days=7), name="Texting Ltd", users=len(phones))
    with tenant_tx(tenant.slug) as tx:
        for user, phone in zip(users, phones, strict=True):
            save_phone(tx, user.id, phone)
            set_sms_category(tx, user.id, CATEGORY, sms)
    return [u.id for u in users]


def _claim(tenant: Tenant) -> list[int]:
    with tenant_tx(tenant.slug) as tx:
        claim_due_milestones(tx, AS_OF)
        prepare_claims(tx)
        return [int(str(r[0])) for r in tx.conn.execute("SELECT id FROM sms_deliveries ORDER BY id")]


def _deliver_after_setup(tenant: Tenant, ids: list[int]) -> None:
    """Deliver with a worker started only now: the wake-up the claim enqueued is flushed
    with the broker, so no text can go out before the test has changed what it wanted."""
    running = RunningWorker()
    try:
        deliver_sms.send(tenant.slug, *ids)
        running.drain()
    finally:
        running.stop()


def _status(tenant: Tenant) -> list[tuple[object, ...]]:
    with tenant_tx(tenant.slug) as tx:
        return tx.conn.execute("SELECT status, status_reason FROM sms_deliveries ORDER BY id").fetchall()


def test_a_text_is_published_once_to_the_local_sns_endpoint_and_its_price_counted(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    _people(tenant, [PHONE])
    [delivery_id] = _claim(tenant)
    for _ in range(3):  # repeated messages publish nothing more
        deliver_sms.send(tenant.slug, delivery_id)
    worker.drain()

    [(number, text)] = _texts_at_endpoint()
    assert number == PHONE
    assert text.startswith("Tocsin: Texting Ltd: one week until access pauses")
    assert text.endswith("/licence")
    assert _status(tenant) == [("accepted", None)]
    with tenant_tx(tenant.slug) as tx:
        attempts = tx.conn.execute("SELECT outcome, segments, cost FROM sms_attempts").fetchall()
    assert [(a[0], a[1], str(a[2])) for a in attempts] == [("accepted", 1, "0.01000")]
    claimed = "SELECT delivered_at IS NOT NULL FROM notification_ledger WHERE status = 'claimed'"
    assert scalar(tenant, claimed) is True


def test_a_number_opted_out_at_the_provider_gets_no_text_and_joins_the_stop_list(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    _people(tenant, [OPTED_OUT_AT_SNS])
    deliver_sms.send(tenant.slug, *_claim(tenant))
    worker.drain()
    assert _texts_at_endpoint() == []
    [(status, reason)] = _status(tenant)
    assert status == "cancelled" and "opted out" in str(reason)
    assert scalar(tenant, "SELECT source FROM sms_opt_outs WHERE phone = %s", OPTED_OUT_AT_SNS) == "provider"


def test_a_number_on_the_tenants_stop_list_gets_no_text(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    [user] = _people(tenant, [PHONE])
    with tenant_tx(tenant.slug) as tx:
        stop_texts(tx, user)
    deliver_sms.send(tenant.slug, *_claim(tenant))
    worker.drain()
    assert _texts_at_endpoint() == []
    assert _status(tenant) == [("cancelled", "the number asked to STOP texts")]


def test_the_monthly_spend_cap_refuses_a_text_with_the_reason_recorded(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    use_settings(sms_monthly_spend_cap=0.015, sms_price_per_segment=0.01)  # room for one text
    _people(tenant, [PHONE, "+447400123457"])
    deliver_sms.send(tenant.slug, *_claim(tenant))
    worker.drain()
    assert len(_texts_at_endpoint()) == 1
    statuses = sorted(_status(tenant), key=lambda s: str(s[0]))
    assert statuses[0] == ("accepted", None)
    assert statuses[1][0] == "cancelled"
    assert str(statuses[1][1]).startswith("monthly SMS spend cap reached: 0.01 of 0.02 spent in ")
    # The refused text reserved nothing: the month's spend is the one text sent.
    assert str(scalar(tenant, "SELECT sum(cost) FROM sms_attempts")) == "0.01000"


def test_a_user_who_turned_the_categorys_sms_off_gets_none(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    _people(tenant, [PHONE], sms=False)
    assert _claim(tenant) == []  # nothing queued
    assert _texts_at_endpoint() == []


def test_turning_sms_off_after_the_claim_cancels_the_waiting_text(tenant: Tenant, ses: SesOutbox) -> None:
    [user] = _people(tenant, [PHONE])
    ids = _claim(tenant)
    with tenant_tx(tenant.slug) as tx:
        set_sms_category(tx, user, CATEGORY, False)
    _deliver_after_setup(tenant, ids)
    assert _texts_at_endpoint() == []
    assert _status(tenant) == [("cancelled", SMS_OFF)]


@pytest.mark.parametrize("critical", [False, True])
def test_quiet_hours_defer_a_text_like_an_email_and_a_critical_notice_goes_through(
    tenant: Tenant, ses: SesOutbox, critical: bool
) -> None:
    [user] = _people(tenant, [PHONE])
    with tenant_tx(tenant.slug) as tx:
        save_schedule(tx, user, quiet=QuietHours(time(22), time(7)), digest_time=time(8), weekly_day=1,
                      zone="Europe/London")
        if critical:
            tx.conn.execute(
                "INSERT INTO category_defaults (category, in_app, email, frequency, critical) "
                "VALUES (%s, true, true, 'instant', true)", [CATEGORY])
    ids = _claim(tenant)
    night = datetime(2027, 9, 1, 23, 0, tzinfo=UTC)  # midnight in London: quiet
    with pinned(night):
        _deliver_after_setup(tenant, ids)
    if critical:
        assert len(_texts_at_endpoint()) == 1
        assert _status(tenant) == [("accepted", None)]
    else:
        assert _texts_at_endpoint() == []
        assert _status(tenant) == [("deferred", "quiet hours")]
        end = scalar(tenant, "SELECT send_after FROM sms_deliveries")
        assert end == datetime(2027, 9, 2, 6, 0, tzinfo=UTC)  # 07:00 in London (BST)


def test_a_phone_number_is_kept_in_e164_and_one_that_is_not_a_mobile_number_is_refused(
    tenant: Tenant
) -> None:
    _, [user] = add_client(tenant, AS_OF.date(), name="Numbers Ltd")
    with tenant_tx(tenant.slug) as tx:
        assert save_phone(tx, user.id, "0044 7400 123456") == PHONE
        for typed, says in (("07400 123456", "country code"), ("+44 20 7946 0958", "mobile"),
                            ("+1 555", "numbering plan"), ("+()", "not a phone number")):
            with pytest.raises(InvalidInput, match=says):
                save_phone(tx, user.id, typed)
    assert scalar(tenant, "SELECT phone FROM sms_numbers") == PHONE


def test_a_worker_lost_after_the_publish_leaves_the_text_unknown_and_held_and_one_lost_before_it_retries(
    tenant: Tenant, ses: SesOutbox
) -> None:
    _people(tenant, [PHONE, "+447400123457"])
    ids = _claim(tenant)
    before, after = claim_sms(tenant.slug, ids, lease_seconds=60, portal_url="http://portal")
    assert mark_called(tenant.slug, after, Decimal("0.01"), Decimal("50")).go  # then the worker dies
    with tenant_tx(tenant.slug) as tx:  # both leases run out
        tx.conn.execute("UPDATE sms_deliveries SET lease_until = now() - interval '1 second'")
    swept = sweep_sms(tenant.slug)
    assert (swept.retried, swept.unknown) == (1, 1)
    with tenant_tx(tenant.slug) as tx:
        rows = dict(tx.conn.execute("SELECT id, status FROM sms_deliveries").fetchall())
        spent = tx.conn.execute("SELECT sum(cost) FROM sms_attempts").fetchone()
    assert rows == {before.delivery_id: "pending", after.delivery_id: "unknown"}
    assert spent is not None and str(spent[0]) == "0.01000"  # the unknown one may have been sent
    assert sweep_sms(tenant.slug).unknown == 0  # held: not resent, not counted twice


def test_the_sweeper_adds_numbers_that_sns_lists_as_opted_out_to_the_stop_list(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    listed = "+447420500600"  # on the local endpoint's opt-out list
    _people(tenant, [listed, PHONE])
    _opt_out_list.forget()
    sweep_tenant.send(tenant.slug)
    worker.drain()
    with tenant_tx(tenant.slug) as tx:
        assert tx.conn.execute("SELECT phone, source FROM sms_opt_outs").fetchall() == [(listed, "provider")]
    deliver_sms.send(tenant.slug, *_claim(tenant))
    worker.drain()
    assert [number for number, _ in _texts_at_endpoint()] == [PHONE]


def _rule_texting(tenant: Tenant, phones: list[str], *, stopped: int | None = None) -> tuple[int, list[int]]:
    """A rule naming sms (and the inbox) fired for a case assigned to one person per number,
    none of whom turned texts on for the category: the rule's choice is what sends."""
    product = add_product(tenant)
    people = [add_person(tenant, f"texted{i}@example.com") for i in range(len(phones))]
    with tenant_tx(tenant.slug) as tx:
        for user, phone in zip(people, phones, strict=True):
            save_phone(tx, user, phone)
        if stopped is not None:
            stop_texts(tx, people[stopped])
    subject = add_subject(tenant, product, "C-9", assignees=people, fields={"amount": 10})
    rule = add_rule(tenant, product, "Urgent case", recipients=[{"type": "assignees"}],
                    channels=("in_app", "sms"), title="Urgent {{ subject.external_id }}")
    return fire(tenant, rule, subject), people


def _prepare_rule(tenant: Tenant, claim: int) -> list[int]:
    with tenant_tx(tenant.slug) as tx:
        prepare_rule_claims(tx, [claim])
        return [int(str(r[0])) for r in tx.conn.execute("SELECT id FROM sms_deliveries ORDER BY id")]


def test_a_rule_naming_sms_texts_each_recipient_with_a_number_once_and_not_one_who_stopped(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    claim, _ = _rule_texting(tenant, [PHONE, "+447400123457"], stopped=1)
    ids = _prepare_rule(tenant, claim)
    assert _prepare_rule(tenant, claim) == ids  # a claim prepared twice queues nothing more
    for _ in range(2):  # repeated messages publish nothing more
        deliver_sms.send(tenant.slug, *ids)
    worker.drain()
    [(number, text)] = _texts_at_endpoint()
    assert number == PHONE and text.startswith("Tocsin: Urgent C-9")
    assert sorted(_status(tenant), key=str) == [("accepted", None),
                                                 ("cancelled", "the number asked to STOP texts")]


def test_the_tenants_own_lower_cap_refuses_a_text_with_its_reason(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    use_settings(sms_monthly_spend_cap=50.0, sms_price_per_segment=0.01)
    with tenant_tx(tenant.slug) as tx:
        assert set_spend_cap(tx, "0.015", Decimal("50")) == Decimal("0.02")  # kept in cents
        assert month_spend(tx, Decimal("50")).cap == Decimal("0.02")
    claim, _ = _rule_texting(tenant, [PHONE, "+447400123457", "+447400123458"])
    deliver_sms.send(tenant.slug, *_prepare_rule(tenant, claim))
    worker.drain()
    assert len(_texts_at_endpoint()) == 2
    refused = [s for s in _status(tenant) if s[0] == "cancelled"]
    assert len(refused) == 1
    assert str(refused[0][1]).startswith("monthly SMS spend cap reached: 0.02 of 0.02 spent in ")
    with tenant_tx(tenant.slug) as tx:
        assert month_spend(tx, Decimal("50")).spent == Decimal("0.02")


@pytest.mark.parametrize(("typed", "says"), [("-1", CAP_NEGATIVE), ("50.01", CAP_ABOVE_CEILING),
                                             ("lots", CAP_MALFORMED), ("NaN", CAP_MALFORMED)])
def test_a_tenant_cap_that_is_negative_above_the_operators_or_not_an_amount_is_refused(
    tenant: Tenant, typed: str, says: str
) -> None:
    with tenant_tx(tenant.slug) as tx, pytest.raises(InvalidInput) as refused:
        set_spend_cap(tx, typed, Decimal("50"))
    assert str(refused.value) == says
    assert scalar(tenant, "SELECT count(*) FROM sms_spend_cap") == 0


def test_an_operator_ceiling_lowered_below_the_tenants_cap_still_holds(tenant: Tenant) -> None:
    with tenant_tx(tenant.slug) as tx:
        set_spend_cap(tx, "40", Decimal("50"))
        assert spend_cap(tx, Decimal("10")) == Decimal("10")
        assert spend_cap(tx, Decimal("50")) == Decimal("40")
