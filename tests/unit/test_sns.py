"""What an SNS message must carry before its signature is even checked, the exact string
SNS signs, and the SES events Tocsin reads out of it."""

from datetime import UTC, datetime, timedelta

import pytest

from domain.sns import Untrusted, check_envelope, parse_ses_event, string_to_sign

NOW = datetime(2027, 1, 1, 12, 0, tzinfo=UTC)
TRUSTED = r"^https://sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/"
CERT = "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc.pem"


def _message(**fields: object) -> dict[str, object]:
    return {"Type": "Notification", "MessageId": "m-1", "TopicArn": "arn:t", "Message": "{}",
            "Timestamp": "2027-01-01T11:59:00Z", "SignatureVersion": "2", "Signature": "c2ln",
            "SigningCertURL": CERT, **fields}


def test_the_string_to_sign_follows_snss_field_order_and_skips_an_absent_subject() -> None:
    assert string_to_sign(_message()) == (
        b"Message\n{}\nMessageId\nm-1\nTimestamp\n2027-01-01T11:59:00Z\nTopicArn\narn:t\n"
        b"Type\nNotification\n")
    assert b"Subject\nhello\n" in string_to_sign(_message(Subject="hello"))
    confirmation = _message(Type="SubscriptionConfirmation", Token="tok",
                            SubscribeURL="https://sns.eu-west-1.amazonaws.com/?Action=Confirm")
    assert string_to_sign(confirmation).index(b"SubscribeURL") < string_to_sign(confirmation).index(b"Token")


def test_a_well_formed_recent_message_from_sns_passes_the_envelope_check() -> None:
    assert check_envelope(_message(), TRUSTED, NOW) == "sha256"
    assert check_envelope(_message(SignatureVersion="1"), TRUSTED, NOW) == "sha1"


@pytest.mark.parametrize(
    "fields",
    [
        {"Signature": None},  # unsigned
        {"SignatureVersion": "3"},
        {"SigningCertURL": "https://sns.eu-west-1.amazonaws.com.evil.example/x.pem"},
        {"SigningCertURL": "http://sns.eu-west-1.amazonaws.com/x.pem"},  # not https
        {"SigningCertURL": None},
        {"Timestamp": "2027-01-01T10:59:59Z"},  # older than an hour: a replay
        {"Timestamp": "2027-01-01T12:06:00Z"},  # from the future
        {"Timestamp": "yesterday"},
        {"Type": "Other"},
    ],
)
def test_untrusted_envelopes_are_refused(fields: dict[str, object]) -> None:
    message = {k: v for k, v in _message(**fields).items() if v is not None}
    with pytest.raises(Untrusted):
        check_envelope(message, TRUSTED, NOW)
        string_to_sign(message)


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


@pytest.mark.parametrize(
    "body",
    [
        {"eventType": "Open", "mail": {}},  # not tracked
        {"eventType": "Delivery"},  # no mail
        {"eventType": "Delivery", "mail": {"messageId": "x", "tags": {}}},  # not ours
        {"eventType": "Delivery", "mail": {"messageId": "x", "timestamp": "2027-01-01T00:00:00Z",
                                           "tags": {"tenant": ["a"], "delivery": ["x1"]}}},
    ],
)
def test_events_that_are_not_tocsins_are_ignored(body: dict[str, object]) -> None:
    assert parse_ses_event(body) is None
