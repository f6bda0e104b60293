"""Provider error classes and the bounded retry schedule."""

from datetime import timedelta

import pytest

from domain.delivery import (
    MAX_ATTEMPTS,
    MAX_DELAY,
    ErrorClass,
    classify_provider_error,
    email_message_id,
    retry_delay,
    should_retry,
)


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("MessageRejected", 400, ErrorClass.PERMANENT),
        ("InvalidParameterValue", 400, ErrorClass.PERMANENT),
        ("TooManyRequestsException", 429, ErrorClass.TRANSIENT),
        ("Throttling", 400, ErrorClass.PERMANENT),
        ("InternalFailure", 500, ErrorClass.TRANSIENT),
        ("ServiceUnavailable", 503, ErrorClass.TRANSIENT),
        (None, None, ErrorClass.TRANSIENT),
        (None, 408, ErrorClass.TRANSIENT),
    ],
)
def test_provider_errors_are_classed_by_code_then_status(
    code: str | None, status: int | None, expected: ErrorClass
) -> None:
    assert classify_provider_error(code, status) is expected


def test_retry_delays_grow_exponentially_within_jitter_bounds_and_are_capped() -> None:
    assert retry_delay(1, 0.0) == timedelta(minutes=2, seconds=30)
    assert retry_delay(1, 0.999) < timedelta(minutes=5)
    assert retry_delay(3, 0.0) == timedelta(minutes=10)
    assert retry_delay(30, 0.999) <= MAX_DELAY
    with pytest.raises(ValueError):
        retry_delay(1, 1.0)


def test_the_whole_schedule_spans_about_three_to_seven_hours() -> None:
    shortest = sum((retry_delay(n, 0.0) for n in range(1, MAX_ATTEMPTS)), timedelta())
    longest = sum((retry_delay(n, 0.999) for n in range(1, MAX_ATTEMPTS)), timedelta())
    assert timedelta(hours=3) < shortest < longest < timedelta(hours=7)


def test_only_transient_errors_retry_and_only_up_to_the_bound() -> None:
    assert should_retry(ErrorClass.TRANSIENT, 1)
    assert not should_retry(ErrorClass.TRANSIENT, MAX_ATTEMPTS)
    assert not should_retry(ErrorClass.PERMANENT, 1)


def test_a_deliverys_message_id_is_the_same_on_every_attempt() -> None:
    assert email_message_id("acme", 42, "tocsin.example") == "<delivery-42.acme@tocsin.example>"
