"""The SMS and email-failover decisions of domain/delivery/sms.py and failover.py: segments
and price, the text of a notice, the spend cap, who gets a text now, SNS error classes; when
an SES failure sends an email through SMTP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from domain.delivery.failover import FailoverPolicy, SesFailure, SesRun, failover_reason, next_run
from domain.delivery.preferences import SendAction
from domain.delivery.sms import (
    MAX_SEGMENTS,
    SMS_OFF,
    SmsRecipient,
    classify_sns_error,
    cost_of,
    segments,
    sms_decision,
    sms_text,
    spend_refusal,
)
from domain.delivery.states import ErrorClass
from domain.errors import InvalidInput

NOW = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "parts"), [
    ("a" * 160, 1), ("a" * 161, 2), ("a" * 306, 2), ("a" * 307, 3),
    ("€" * 80, 1), ("€" * 81, 2),  # an extension character takes two septets
    ("é" * 160, 1),  # é is in the GSM alphabet
    ("ł" * 70, 1), ("ł" * 71, 2), ("ł" * 134, 2), ("ł" * 135, 3),  # UCS-2
])
def test_a_text_is_counted_in_gsm_or_ucs2_segments(text: str, parts: int) -> None:
    assert segments(text) == parts


def test_a_long_title_is_cut_and_the_link_kept_within_the_segment_limit() -> None:
    text = sms_text("Review " * 200, "https://portal.example/clients/7")
    assert text.startswith("Tocsin: Review") and text.endswith(" https://portal.example/clients/7")
    assert segments(text) == MAX_SEGMENTS


def test_the_price_is_segments_times_the_price_of_one() -> None:
    assert cost_of("a" * 200, Decimal("0.0075")) == Decimal("0.01500")


def test_the_spend_cap_refuses_the_text_that_would_pass_it_and_says_by_how_much() -> None:
    assert spend_refusal(Decimal("49.98"), Decimal("0.02"), Decimal("50"), "2027-09") is None
    reason = spend_refusal(Decimal("49.99"), Decimal("0.02"), Decimal("50"), "2027-09")
    assert reason == ("monthly SMS spend cap reached: 49.99 of 50.00 spent in 2027-09, "
                      "and this text costs 0.0200")


@pytest.mark.parametrize(("recipient", "quiet", "action", "reason"), [
    (SmsRecipient(None, True, False, False), None, SendAction.CANCEL, "recipient has no mobile number"),
    (SmsRecipient("+447400123456", False, False, False), None, SendAction.CANCEL, SMS_OFF),
    (SmsRecipient("+447400123456", True, True, True), None, SendAction.CANCEL,
     "the number asked to STOP texts"),
    (SmsRecipient("+447400123456", True, False, False), NOW, SendAction.DEFER, None),
    (SmsRecipient("+447400123456", True, False, True), NOW, SendAction.SEND, None),
    (SmsRecipient("+447400123456", True, False, False), None, SendAction.SEND, None),
])
def test_who_gets_a_text_now(recipient: SmsRecipient, quiet: datetime | None, action: SendAction,
                             reason: str | None) -> None:
    check = sms_decision(recipient, quiet)
    assert (check.action, check.reason) == (action, reason)


def test_sns_errors_are_classed_like_the_other_providers() -> None:
    assert classify_sns_error("Throttled", 400) is ErrorClass.TRANSIENT
    assert classify_sns_error("InvalidParameter", 400) is ErrorClass.PERMANENT
    assert classify_sns_error("InternalError", 500) is ErrorClass.TRANSIENT


def test_no_failover_class_chosen_means_ses_only() -> None:
    run = next_run(SesRun(), SesFailure("SendingPausedException", 400), NOW)
    assert failover_reason(FailoverPolicy(), SesFailure("SendingPausedException", 400), run, NOW) is None


def test_sending_paused_fails_over_at_once() -> None:
    failure = SesFailure("SendingPausedException", 400)
    run = next_run(SesRun(), failure, NOW)
    reason = failover_reason(FailoverPolicy(on_paused=True), failure, run, NOW)
    assert reason == "SES sending paused (SendingPausedException)"


def test_throttling_fails_over_only_past_the_tenants_patience() -> None:
    policy = FailoverPolicy(on_throttled=True, throttled_minutes=15)
    failure = SesFailure("Throttling", 400)
    run = next_run(SesRun(), failure, NOW)
    assert failover_reason(policy, failure, run, NOW + timedelta(minutes=14)) is None
    later = next_run(run, failure, NOW + timedelta(minutes=15))
    assert later.throttled_since == NOW
    reason = failover_reason(policy, failure, later, NOW + timedelta(minutes=15))
    assert "throttling for 15 min" in str(reason)


def test_a_run_of_5xx_counts_answers_in_a_row_and_another_error_breaks_it() -> None:
    policy, failure = FailoverPolicy(on_5xx=True, run_of_5xx=3), SesFailure("ServiceUnavailable", 503)
    run = next_run(next_run(SesRun(), failure, NOW), failure, NOW)
    assert failover_reason(policy, failure, run, NOW) is None
    broken = next_run(run, SesFailure("MessageRejected", 400), NOW)
    assert broken == SesRun(0, None)
    run = next_run(run, failure, NOW)
    assert failover_reason(policy, failure, run, NOW) == \
        "SES answered 3 server error(s) in a row (last HTTP 503)"


def test_a_policy_out_of_bounds_is_refused_with_a_message() -> None:
    with pytest.raises(InvalidInput, match="run of 5xx"):
        FailoverPolicy(run_of_5xx=0)
    with pytest.raises(InvalidInput, match="throttling patience"):
        FailoverPolicy(throttled_minutes=2000)
