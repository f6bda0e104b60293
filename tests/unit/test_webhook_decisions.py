"""The webhook decisions of domain/delivery/webhooks.py: the SSRF guard on resolved
addresses, the retry schedule, the circuit breaker and disabling, the answers' classes.
No test here opens a connection: the guard is a function of addresses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain.delivery.channels import (
    CHANNELS,
    DEDUPED_CALLS_PER_COMMIT,
    Channel,
    calls_per_commit,
    classify_http_answer,
    spec,
)
from domain.delivery.states import ErrorClass
from domain.delivery.webhooks import (
    BREAKER_COOLDOWN,
    BREAKER_FAILURES,
    DISABLE_AFTER,
    MAX_ATTEMPTS,
    WEBHOOK,
    DestinationRefused,
    EndpointHealth,
    after_failure,
    check_destination,
    classify_webhook_answer,
    clip_response,
    payload,
    refusal_reason,
    retry_delay,
    valid_endpoint_url,
    valid_event_kinds,
    webhook_id,
)
from domain.errors import InvalidInput

NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)
REFUSED = ["127.0.0.1", "::1", "169.254.169.254", "10.0.0.1", "192.168.1.20", "172.16.0.9",
           "100.64.0.1", "0.0.0.0", "::", "fe80::1", "fd00:ec2::254", "fc00::5", "::ffff:127.0.0.1",
           "::ffff:169.254.169.254", "224.0.0.1", "127.8.9.10"]


@pytest.mark.parametrize("address", REFUSED)
def test_the_guard_refuses_loopback_private_link_local_and_metadata_addresses(address: str) -> None:
    assert refusal_reason(address) is not None
    with pytest.raises(DestinationRefused):
        check_destination("example.com", [address], allow_private=False)


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "1.1.1.1"])
def test_the_guard_allows_public_addresses(address: str) -> None:
    assert refusal_reason(address) is None
    assert check_destination("example.com", [address], allow_private=False) == address


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "169.254.169.254", "10.0.0.1"])
def test_a_hostname_resolving_to_a_refused_address_among_public_ones_is_refused(address: str) -> None:
    with pytest.raises(DestinationRefused, match=r"rebind\.example"):
        check_destination("rebind.example", ["93.184.215.14", address], allow_private=False)


def test_the_metadata_address_is_named_as_such() -> None:
    assert refusal_reason("169.254.169.254") == "a cloud metadata address"


def test_with_private_allowed_the_guard_returns_the_first_resolved_address() -> None:
    assert check_destination("localhost", ["127.0.0.1", "::1"], allow_private=True) == "127.0.0.1"


def test_a_name_that_resolves_to_nothing_is_refused() -> None:
    with pytest.raises(DestinationRefused, match="no address"):
        check_destination("nowhere.example", [], allow_private=True)


def test_endpoint_urls_must_be_https_without_credentials_unless_private_is_allowed() -> None:
    assert valid_endpoint_url(" https://hooks.example.com/in ", allow_private=False) == \
        "https://hooks.example.com/in"
    with pytest.raises(InvalidInput, match="https://"):
        valid_endpoint_url("http://hooks.example.com/in", allow_private=False)
    with pytest.raises(InvalidInput, match="credentials"):
        valid_endpoint_url("https://user:pw@hooks.example.com/", allow_private=False)
    with pytest.raises(DestinationRefused):
        valid_endpoint_url("https://169.254.169.254/latest/meta-data", allow_private=False)
    with pytest.raises(InvalidInput, match="port"):
        valid_endpoint_url("https://hooks.example.com:99999/", allow_private=False)
    assert valid_endpoint_url("http://127.0.0.1:9000/", allow_private=True) == "http://127.0.0.1:9000/"
    for broken in ("https://[::1/", "https://hooks.example.com/a b", "https://hooks\x00.example.com/"):
        with pytest.raises(InvalidInput):
            valid_endpoint_url(broken, allow_private=True)


def test_event_kinds_are_checked_and_deduplicated() -> None:
    assert valid_event_kinds(["notice.created", "notice.created"]) == ("notice.created",)
    with pytest.raises(InvalidInput, match="unknown event kind"):
        valid_event_kinds(["notice.deleted"])
    with pytest.raises(InvalidInput, match="at least one"):
        valid_event_kinds([" "])


def test_retries_back_off_threefold_with_jitter_over_about_a_day() -> None:
    base = timedelta(seconds=10)
    assert retry_delay(1, 0.0, base) == timedelta(seconds=5)
    assert retry_delay(2, 0.0, base) == timedelta(seconds=15)
    assert retry_delay(20, 0.0, base) == retry_delay(8, 0.0, base)  # the ceiling stops growing
    shortest = sum((retry_delay(n, 0.0, base) for n in range(1, MAX_ATTEMPTS)), timedelta())
    longest = sum((retry_delay(n, 0.999999, base) for n in range(1, MAX_ATTEMPTS)), timedelta())
    assert timedelta(hours=12) < shortest < timedelta(hours=24) < longest < timedelta(hours=30)


def test_answers_2xx_are_delivered_410_is_permanent_and_the_rest_retried() -> None:
    assert classify_webhook_answer(204) is None
    assert classify_webhook_answer(410) is ErrorClass.PERMANENT
    for code in (301, 400, 404, 429, 500, 503):
        assert classify_webhook_answer(code) is ErrorClass.TRANSIENT


def test_the_breaker_opens_at_the_threshold_and_the_endpoint_is_disabled_after_days() -> None:
    health = EndpointHealth(BREAKER_FAILURES - 2, NOW - timedelta(hours=1))
    verdict = after_failure(health, NOW)
    assert verdict.circuit_open_until is None and verdict.disable_reason is None
    verdict = after_failure(EndpointHealth(verdict.consecutive_failures, verdict.failing_since), NOW)
    assert verdict.circuit_open_until == NOW + BREAKER_COOLDOWN
    assert verdict.failing_since == NOW - timedelta(hours=1)
    late = after_failure(EndpointHealth(40, NOW - DISABLE_AFTER), NOW)
    assert late.disable_reason == "every call failed for 3 days"


def test_a_410_disables_the_endpoint_at_once() -> None:
    verdict = after_failure(EndpointHealth(0, None), NOW, gone=True)
    assert verdict.disable_reason == "the endpoint answered 410 Gone" and verdict.failing_since == NOW


def test_answers_are_kept_to_one_kilobyte_on_a_character_boundary() -> None:
    assert len(clip_response(("é" * 2000).encode()).encode()) <= 1024
    assert clip_response(b"ok") == "ok"


def test_the_payload_is_the_same_bytes_for_the_same_event() -> None:
    one = payload("notice.created", NOW, {"b": 1, "a": 2})
    assert one == payload("notice.created", NOW, {"a": 2, "b": 1})
    assert one.startswith('{"data":{"a":2,"b":1},"timestamp":"2026-12-04T12:00:00+00:00"')


def test_the_webhook_id_is_the_delivery_s_and_the_machine_lets_a_delivery_be_redelivered() -> None:
    assert webhook_id("acme", 42) == "tocsin_acme_42"
    assert ("delivered", "pending") in WEBHOOK.moves and ("pending", "delivered") not in WEBHOOK.moves


def test_each_channel_states_its_address_and_whether_its_receiver_deduplicates() -> None:
    assert spec("webhook").receiver_dedupes and not spec("email").receiver_dedupes
    assert set(CHANNELS) == set(Channel)
    assert classify_http_answer(200) is None
    assert classify_http_answer(400) is ErrorClass.PERMANENT
    assert classify_http_answer(429) is ErrorClass.TRANSIENT


def test_only_a_channel_whose_receiver_drops_repeats_marks_several_calls_in_one_commit() -> None:
    # A crash may leave every call of one commit uncertain; each is sent again.
    assert calls_per_commit(spec("webhook")) == DEDUPED_CALLS_PER_COMMIT > 1
    for name in ("email", "sms", "slack", "teams"):  # a repeat would reach a person twice
        assert calls_per_commit(spec(name)) == 1, name
    assert calls_per_commit(spec("in_app")) == 1  # no provider call at all
