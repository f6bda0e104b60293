"""What an SNS message must carry before its signature is even checked (and before anything
is fetched for it), the exact string SNS signs, and the SES events Tocsin reads out of it."""

from datetime import UTC, datetime, timedelta

import pytest

from domain.delivery.sns_messages import (
    SnsTrust,
    Untrusted,
    check_envelope,
    load_sns_json,
    parse_ses_event,
    string_to_sign,
    valid_test_origin,
    valid_topic_arn,
)
from domain.errors import InvalidInput

NOW = datetime(2027, 1, 1, 12, 0, tzinfo=UTC)
TOPIC = "arn:aws:sns:eu-west-1:123456789012:ses-events"
TRUST = SnsTrust(frozenset({TOPIC}))
CERT = "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc.pem"
SUBSCRIBE = ("https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription"
             f"&TopicArn={TOPIC}&Token=tok")


def _message(**fields: object) -> dict[str, object]:
    return {"Type": "Notification", "MessageId": "m-1", "TopicArn": TOPIC, "Message": "{}",
            "Timestamp": "2027-01-01T11:59:00Z", "SignatureVersion": "2", "Signature": "c2ln",
            "SigningCertURL": CERT, **fields}


def _confirmation(**fields: object) -> dict[str, object]:
    return _message(**{"Type": "SubscriptionConfirmation", "Token": "tok", "SubscribeURL": SUBSCRIBE,
                       **fields})


def test_the_string_to_sign_follows_snss_field_order_and_skips_an_absent_subject() -> None:
    message = _message(TopicArn="arn:t")
    assert string_to_sign(message) == (
        b"Message\n{}\nMessageId\nm-1\nTimestamp\n2027-01-01T11:59:00Z\nTopicArn\narn:t\n"
        b"Type\nNotification\n")
    assert b"Subject\nhello\n" in string_to_sign(_message(Subject="hello"))
    confirmation = _confirmation()
    assert string_to_sign(confirmation).index(b"SubscribeURL") < string_to_sign(confirmation).index(b"Token")


def test_a_well_formed_recent_message_from_an_allowed_topic_passes_the_envelope_check() -> None:
    envelope = check_envelope(_message(), TRUST, NOW)
    assert (envelope.kind, envelope.topic_arn, envelope.digest) == ("Notification", TOPIC, "sha256")
    assert envelope.signature == b"sig"
    assert check_envelope(_message(SignatureVersion="1"), TRUST, NOW).digest == "sha1"
    confirmation = check_envelope(_confirmation(), TRUST, NOW)
    assert (confirmation.subscribe_url, confirmation.token) == (SUBSCRIBE, "tok")


def test_china_regions_and_govcloud_hosts_are_sns_hosts() -> None:
    for cert in ("https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-x.pem",
                 "https://sns.us-gov-west-1.amazonaws.com/SimpleNotificationService-x.pem"):
        assert check_envelope(_message(SigningCertURL=cert), TRUST, NOW).certificate_url == cert


def test_the_certificate_is_named_without_its_query_string() -> None:
    envelope = check_envelope(_message(SigningCertURL=CERT + "?v=1"), TRUST, NOW)
    assert envelope.certificate_url == CERT


@pytest.mark.parametrize(
    "fields",
    [
        {"Signature": None},  # unsigned
        {"Signature": "not base64!"},
        {"Signature": "c2ln" * 300},  # longer than any RSA signature
        {"SignatureVersion": "3"},
        {"SigningCertURL": None},
        {"Timestamp": "2027-01-01T10:59:59Z"},  # older than an hour: a replay
        {"Timestamp": "2027-01-01T12:06:00Z"},  # from the future
        {"Timestamp": "yesterday"},
        {"Timestamp": "0001-01-01T00:00:00+01:00"},
        {"Type": "Other"},
        {"Type": ["Notification"]},
        {"MessageId": None},
        {"MessageId": {"nested": True}},
        {"MessageId": "m" * 5000},
        {"Message": "x" * (256 * 1024 + 1)},
        {"TopicArn": None},
        # Genuinely signed by SNS, but for a topic in someone else's account.
        {"TopicArn": "arn:aws:sns:eu-west-1:666666666666:ses-events"},
    ],
)
def test_malformed_stale_and_foreign_envelopes_are_refused(fields: dict[str, object]) -> None:
    message = {k: v for k, v in _message(**fields).items() if v is not None}
    with pytest.raises(Untrusted):
        check_envelope(message, TRUST, NOW)


@pytest.mark.parametrize(
    "url",
    [
        "https://sns.s3.amazonaws.com/x.pem",  # an S3 bucket: anyone's file
        "https://sns.attacker.amazonaws.com/x.pem",
        "https://sns.eu-west-1.amazonaws.com.evil.example/x.pem",
        "https://evil.example/sns.eu-west-1.amazonaws.com/x.pem",
        "https://sns.eu-west-1.amazonaws.com@evil.example/x.pem",
        "https://user@sns.eu-west-1.amazonaws.com/x.pem",
        "https://sns.eu-west-1.amazonaws.com:8443/x.pem",
        "https://sns.eu-west-1.amazonaws.com\\@evil.example/x.pem",
        "https://SNS.EU-WEST-1.AMAZONAWS.COM.evil.example/x.pem",
        "http://sns.eu-west-1.amazonaws.com/x.pem",  # not https
        "https://sns.eu-west-1.amazonaws.com/x.txt",  # not a .pem
        "https://sns.eu-west-1.amazonaws.com/x.pem#frag",
        "https://sns.eu-west-1.amazonaws.com/x.pem\n",
        "http://127.0.0.1:9/cert.pem",  # the test origin, not configured here
        "file:///etc/ssl/cert.pem",
    ],
)
def test_certificate_urls_off_amazons_sns_hosts_are_refused(url: str) -> None:
    with pytest.raises(Untrusted):
        check_envelope(_message(SigningCertURL=url), TRUST, NOW)


@pytest.mark.parametrize(
    "url",
    [
        "https://sns.s3.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + TOPIC,
        "https://sns.eu-west-1.amazonaws.com/?Action=Subscribe&TopicArn=" + TOPIC,
        "https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription"
        "&TopicArn=arn:aws:sns:eu-west-1:666666666666:other",
        "https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription",
    ],
)
def test_subscribe_urls_that_do_not_confirm_this_topic_at_sns_are_refused(url: str) -> None:
    with pytest.raises(Untrusted):
        check_envelope(_confirmation(SubscribeURL=url), TRUST, NOW)


def test_the_test_origin_is_trusted_only_when_set_and_only_on_loopback() -> None:
    trust = SnsTrust(frozenset({TOPIC}), test_origin="http://127.0.0.1:8123")
    assert check_envelope(_message(SigningCertURL="http://127.0.0.1:8123/cert.pem"), trust, NOW)
    with pytest.raises(Untrusted):
        check_envelope(_message(SigningCertURL="http://127.0.0.1:8124/cert.pem"), trust, NOW)
    assert valid_test_origin("http://localhost:9000/") == "http://localhost:9000"
    for origin in ("https://evil.example", "http://127.0.0.1.evil.example:80", "http://10.0.0.1:80",
                   "http://user@127.0.0.1:80", "http://127.0.0.1:80/path"):
        with pytest.raises(InvalidInput):
            valid_test_origin(origin)


def test_topic_arns_are_checked_when_configured() -> None:
    assert valid_topic_arn(TOPIC) == TOPIC
    assert valid_topic_arn("arn:aws-cn:sns:cn-north-1:123456789012:t.fifo")
    for arn in ("ses-events", "arn:aws:sqs:eu-west-1:123456789012:q", "arn:aws:sns:eu-west-1:1:t", ""):
        with pytest.raises(InvalidInput):
            valid_topic_arn(arn)


def test_deeply_nested_json_is_refused_as_untrusted_not_a_crash() -> None:
    with pytest.raises(Untrusted):
        load_sns_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(Untrusted):
        load_sns_json(b"\xff\xfe")


def _event(kind: str, **extra: object) -> dict[str, object]:
    return {"eventType": kind, "mail": {"timestamp": "2027-01-01T11:00:00Z", "messageId": "ses-1",
                                        "tags": {"tenant": ["acme"], "delivery": ["42"]}}, **extra}


def test_ses_events_name_their_tenant_and_delivery_by_tags() -> None:
    event = parse_ses_event(_event("Bounce", bounce={"bounceType": "Permanent", "bounceSubType": "General"}))
    assert event is not None
    assert (event.tenant, event.delivery_id, event.event_type, event.provider_message_id) == \
        ("acme", 42, "bounce", "ses-1")
    assert event.permanent_bounce and event.detail == "Permanent/General"
    assert event.occurred_at == NOW - timedelta(hours=1)
    soft = parse_ses_event(_event("Bounce", bounce={"bounceType": "Transient"}))
    assert soft is not None and not soft.permanent_bounce
    complaint = parse_ses_event(_event("Complaint", complaint={"complaintFeedbackType": "abuse"}))
    assert complaint is not None and complaint.detail == "abuse"


def _tagged(tenant: object, delivery: object) -> dict[str, object]:
    return {"eventType": "Delivery", "mail": {"messageId": "x", "timestamp": "2027-01-01T00:00:00Z",
                                              "tags": {"tenant": [tenant], "delivery": [delivery]}}}


@pytest.mark.parametrize(
    "body",
    [
        {"eventType": "Open", "mail": {}},  # not tracked
        {"eventType": "Delivery"},  # no mail
        {"eventType": ["Delivery"], "mail": {}},  # not even a name
        {"eventType": "Delivery", "mail": {"messageId": "x", "tags": {}}},  # not ours
        _tagged("a", "x1"),
        _tagged("acme", "²"),  # a digit to str.isdigit(), not to int()
        _tagged("acme", "1" * 30),  # beyond any delivery id
        _tagged("Not A Slug", "1"),
    ],
)
def test_events_that_are_not_tocsins_are_ignored(body: dict[str, object]) -> None:
    assert parse_ses_event(body) is None


def test_an_ses_record_with_a_control_character_in_its_id_is_not_tracked_nor_nul_kept() -> None:
    base = {"eventType": "Bounce", "mail": {"timestamp": "2027-01-01T12:00:00Z", "messageId": "\x00",
                                             "tags": {"tenant": ["acme"], "delivery": ["7"]}},
            "bounce": {"bounceType": "Permanent\x00", "bounceSubType": "General"}}
    assert parse_ses_event(base) is None
    base["mail"]["messageId"] = "0100018c-abc"  # type: ignore[index]
    event = parse_ses_event(base)
    assert event is not None and event.detail == "Permanent/General"
