"""The delivery state machine, provider error classes and the bounded retry schedule."""

from datetime import timedelta

import pytest

from domain.delivery.states import (
    DELIVERY,
    MAX_ATTEMPTS,
    MAX_DELAY,
    TERMINAL,
    TRANSITIONS,
    ErrorClass,
    Status,
    classify_provider_error,
    email_message_id,
    email_text,
    retry_delay,
    should_retry,
)

S = Status

# (from, to, allowed): the moves the product makes, and the ones it must never make.
MOVES = [
    (S.PENDING, S.SENDING, True),  # a worker claims it
    (S.DEFERRED, S.SENDING, True),  # quiet hours ended
    (S.PENDING, S.DEFERRED, True),  # quiet hours began before the send
    (S.DEFERRED, S.DEFERRED, True),  # still in quiet hours when due (they moved): held again
    (S.PENDING, S.BATCHED, True),  # the recipient switched to a digest
    (S.SENDING, S.ACCEPTED, True),
    (S.SENDING, S.PENDING, True),  # transient error: retry later
    (S.SENDING, S.FAILED, True),  # permanent error or attempts exhausted
    (S.SENDING, S.UNKNOWN, True),  # the answer was lost
    (S.SENDING, S.CANCELLED, True),  # no longer eligible at the last check
    (S.UNKNOWN, S.ACCEPTED, True),  # a provider event proved it was sent
    (S.UNKNOWN, S.PENDING, True),  # no event: resend with the same Message-ID
    (S.ACCEPTED, S.DELIVERED, True),
    (S.ACCEPTED, S.BOUNCED, True),
    (S.DELIVERED, S.COMPLAINED, True),
    (S.BATCHED, S.DELIVERED, True),  # delivered by its digest
    (S.FAILED, S.PENDING, True),  # an operator's explicit retry
    (S.ACCEPTED, S.PENDING, False),  # an accepted message is never sent again
    (S.ACCEPTED, S.SENDING, False),
    (S.DELIVERED, S.ACCEPTED, False),
    (S.CANCELLED, S.PENDING, False),
    (S.BOUNCED, S.DELIVERED, False),
    (S.PENDING, S.ACCEPTED, False),  # acceptance needs a claim first
    (S.UNKNOWN, S.SENDING, False),  # a resend goes through pending (and the sweeper)
    (S.BATCHED, S.SENDING, False),  # batched items are sent by their digest only
]


@pytest.mark.parametrize(("current", "target", "allowed"), MOVES)
def test_state_machine_moves(current: Status, target: Status, allowed: bool) -> None:
    assert ((current, target) in DELIVERY.moves) is allowed


def test_every_status_has_a_row_and_terminal_ones_only_lead_nowhere_new() -> None:
    assert set(TRANSITIONS) == set(Status)
    for status in TERMINAL - {S.FAILED}:
        assert TRANSITIONS[status] == frozenset()
    assert DELIVERY.sources(S.SENDING) == {S.PENDING, S.DEFERRED}
    assert S.ACCEPTED not in DELIVERY.sources(S.PENDING)


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("MessageRejected", 400, ErrorClass.PERMANENT),
        ("InvalidParameterValue", 400, ErrorClass.PERMANENT),
        ("TooManyRequestsException", 429, ErrorClass.TRANSIENT),
        ("Throttling", 400, ErrorClass.TRANSIENT),  # SES v1 throttles with a 400
        ("LimitExceededException", 400, ErrorClass.TRANSIENT),
        ("InternalFailure", 500, ErrorClass.TRANSIENT),
        ("ServiceUnavailable", 503, ErrorClass.TRANSIENT),
        ("SomethingNew", 403, ErrorClass.PERMANENT),
        (None, None, ErrorClass.TRANSIENT),
        (None, 408, ErrorClass.TRANSIENT),
    ],
)
def test_provider_errors_are_classed_by_code_then_status(
    code: str | None, status: int | None, expected: ErrorClass
) -> None:
    assert classify_provider_error(code, status) is expected


@pytest.mark.parametrize(
    ("attempt", "jitter", "expected"),
    [
        (1, 0.0, timedelta(minutes=3)),
        (1, 0.5, timedelta(minutes=4, seconds=30)),
        (2, 0.0, timedelta(minutes=6)),
        (3, 0.0, timedelta(minutes=12)),
        (6, 0.0, timedelta(hours=1)),  # capped at two hours, jitter over its upper half
        (7, 0.0, timedelta(hours=1)),
        (40, 0.0, timedelta(hours=1)),
    ],
)
def test_retry_delays_grow_exponentially_within_jitter_bounds_and_are_capped(
    attempt: int, jitter: float, expected: timedelta
) -> None:
    assert retry_delay(attempt, jitter) == expected
    assert retry_delay(attempt, 0.999) <= MAX_DELAY


@pytest.mark.parametrize(("attempt", "jitter"), [(0, 0.0), (1, 1.0), (1, -0.1)])
def test_retry_delay_refuses_nonsense(attempt: int, jitter: float) -> None:
    with pytest.raises(ValueError):
        retry_delay(attempt, jitter)


def test_the_whole_schedule_spans_about_six_hours() -> None:
    waits = range(1, MAX_ATTEMPTS)  # the delays between the attempts of one delivery
    shortest = sum((retry_delay(n, 0.0) for n in waits), timedelta())
    longest = sum((retry_delay(n, 0.999999) for n in waits), timedelta())
    assert timedelta(hours=3) < shortest < timedelta(hours=6) < longest < timedelta(hours=8)
    assert shortest + (longest - shortest) / 2 == pytest.approx(timedelta(hours=5, minutes=20),
                                                              abs=timedelta(minutes=10))


@pytest.mark.parametrize(
    ("error_class", "attempts", "retry"),
    [
        (ErrorClass.TRANSIENT, 1, True),
        (ErrorClass.TRANSIENT, MAX_ATTEMPTS - 1, True),
        (ErrorClass.TRANSIENT, MAX_ATTEMPTS, False),
        (ErrorClass.PERMANENT, 1, False),
        (ErrorClass.UNCERTAIN, 1, False),  # reconciliation decides, never a blind retry
    ],
)
def test_retry_is_bounded_and_only_for_transient_errors(
    error_class: ErrorClass, attempts: int, retry: bool
) -> None:
    assert should_retry(error_class, attempts) is retry


def test_a_deliverys_message_id_is_the_same_on_every_attempt() -> None:
    assert email_message_id("acme", 42, "tocsin.example") == "<delivery-42.acme@tocsin.example>"


def test_email_text_carries_the_links() -> None:
    text = email_text("Body", "https://p/licence", "https://p/unsubscribe/x")
    assert "https://p/licence" in text and "https://p/unsubscribe/x" in text
