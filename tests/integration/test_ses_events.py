"""POST /hooks/ses through the real app: SNS messages signed by a test key whose
certificate the hook fetches from a trusted (test) address. Unsigned, forged, untrusted,
stale and replayed messages, and messages from topics not in SNS_ALLOWED_TOPIC_ARNS, get 403
and change nothing (nothing is even fetched for them); valid events move the delivery and
bounces and complaints suppress the address for every later send."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from litestar import Litestar
from litestar.testing import TestClient

from actors.email import deliver_email
from db.notices.scan import run_scan
from db.platform.tenancy import Tenant, tenant_tx
from portal.sns import MAX_CACHED_CERTIFICATES, cached_certificate_urls
from tests.integration.builders import add_client, scalar
from tests.integration.conftest import SesOutbox
from tests.support.sns_signer import ATTACKER_TOPIC, SnsSigner, ses_event
from tocsin.boot.web import build_app

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def hook(sns_signer: SnsSigner) -> Iterator[TestClient[Litestar]]:
    with TestClient(app=build_app()) as client:
        yield client


def _post(hook: TestClient[Litestar], message: dict[str, object]) -> int:
    return hook.post("/hooks/ses", content=json.dumps(message),
                     headers={"content-type": "text/plain; charset=UTF-8"}).status_code


def _sent_delivery(tenant: Tenant, ses: SesOutbox, users: int = 1) -> tuple[int, str]:
    add_client(tenant, AS_OF.date() + timedelta(days=7), users=users)
    run_scan(tenant.slug, AS_OF)
    delivery_id = int(scalar(tenant, "SELECT min(id) FROM notification_deliveries"))
    deliver_email(tenant.slug, delivery_id)
    provider_id = str(scalar(tenant, "SELECT provider_message_id FROM notification_deliveries "
                                     "WHERE id = %s", delivery_id))
    return delivery_id, provider_id


def _status(tenant: Tenant, delivery_id: int) -> str:
    return str(scalar(tenant, "SELECT status FROM notification_deliveries WHERE id = %s", delivery_id))


def _events(tenant: Tenant) -> int:
    return int(scalar(tenant, "SELECT count(*) FROM delivery_events"))


def _control(sql: str, *params: object) -> object:
    from db.platform.pool import connection

    with connection() as conn:
        row = conn.execute(sql, list(params)).fetchone()
    assert row is not None
    return row[0]


def test_a_subscription_confirmation_is_verified_and_confirmed(
    hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    message = sns_signer.subscription()
    assert _post(hook, message) == 200
    assert [f"{sns_signer.base}{path}" for path in sns_signer.confirmations] == [message["SubscribeURL"]]
    assert _control("SELECT topic_arn FROM control.sns_subscriptions WHERE message_id = %s",
                    message["MessageId"]) == sns_signer.topic


def test_a_replayed_subscription_confirmation_is_refused_without_visiting_sns_again(
    hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    message = sns_signer.subscription()
    assert _post(hook, message) == 200
    assert _post(hook, message) == 403  # the same message again
    # The same token under a fresh message id (as a replay through another path would be).
    resent = sns_signer.sign({**{k: v for k, v in message.items() if k != "Signature"},
                              "MessageId": "another-id"})
    assert _post(hook, resent) == 403
    assert len(sns_signer.confirmations) == 1


def test_an_attackers_topic_is_not_subscribed_and_nothing_is_fetched_for_it(
    hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    """The attack: subscribe the portal to a topic in the attacker's own AWS account (SNS
    signs that confirmation genuinely). Refused before any certificate or SubscribeURL is
    fetched, and nothing is recorded."""
    message = sns_signer.subscription(topic=ATTACKER_TOPIC)
    response = hook.post("/hooks/ses", content=json.dumps(message))
    assert response.status_code == 403
    assert "SNS_ALLOWED_TOPIC_ARNS" in response.text
    assert sns_signer.requests == []
    assert _control("SELECT count(*) FROM control.sns_subscriptions WHERE topic_arn = %s",
                    ATTACKER_TOPIC) == 0
    assert _control("SELECT count(*) FROM control.sns_messages WHERE message_id = %s",
                    message["MessageId"]) == 0


def test_an_attackers_topic_moves_no_delivery_and_suppresses_no_address(
    tenant: Tenant, ses: SesOutbox, hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    delivery_id, provider_id = _sent_delivery(tenant, ses)
    for event in (
        ses_event("Delivery", tenant.slug, delivery_id, provider_id),
        ses_event("Complaint", tenant.slug, delivery_id, provider_id,
                  complaint={"complaintFeedbackType": "abuse"}),
        ses_event("Bounce", tenant.slug, delivery_id, provider_id, bounce={"bounceType": "Permanent"}),
        ses_event("Reject", tenant.slug, delivery_id, provider_id),
    ):
        _refused(tenant, hook, sns_signer.notification(event, topic=ATTACKER_TOPIC), delivery_id)
    assert _status(tenant, delivery_id) == "accepted"
    assert sns_signer.requests == []


def test_certificate_urls_off_the_trusted_hosts_are_refused_without_fetching(
    tenant: Tenant, ses: SesOutbox, hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    delivery_id, provider_id = _sent_delivery(tenant, ses)
    bounce = ses_event("Bounce", tenant.slug, delivery_id, provider_id, bounce={"bounceType": "Permanent"})
    unsigned = {k: v for k, v in sns_signer.notification(bounce).items() if k != "Signature"}
    for url in (f"{sns_signer.base}/cert.txt", f"{sns_signer.base}/cert.pem#x",
                "https://sns.s3.amazonaws.com/cert.pem", "https://sns.attacker.amazonaws.com/cert.pem",
                "http://sns.eu-west-1.amazonaws.com/cert.pem"):
        _refused(tenant, hook, sns_signer.sign({**unsigned, "SigningCertURL": url}), delivery_id)
    assert sns_signer.requests == []
    assert not [u for u in cached_certificate_urls() if "amazonaws" in u or u.endswith(".txt")]


def test_the_certificate_is_fetched_once_whatever_its_query_string_and_the_cache_is_bounded(
    tenant: Tenant, hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    foreign = {"eventType": "Delivery", "mail": {"timestamp": "2027-01-01T00:00:00Z", "messageId": "x",
                                                 "tags": {}}}
    for n in range(MAX_CACHED_CERTIFICATES + 4):
        message = {k: v for k, v in sns_signer.notification(foreign).items() if k != "Signature"}
        assert _post(hook, sns_signer.sign({**message, "SigningCertURL":
                                            f"{sns_signer.base}/cert.pem?n={n}"})) == 200
    assert sns_signer.requests == ["/cert.pem"]
    assert len(cached_certificate_urls()) <= MAX_CACHED_CERTIFICATES
    assert f"{sns_signer.base}/cert.pem" in cached_certificate_urls()


def test_seen_message_ids_past_their_retention_are_pruned_a_bounded_batch_at_a_time(
    tenant: Tenant, hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    from db.delivery.provider_events import PRUNE_BATCH
    from db.platform.pool import connection

    old = "received_at < now() - interval '2 hours'"
    with connection() as conn, conn.transaction():
        conn.execute(
            "INSERT INTO control.sns_messages (message_id, topic_arn, received_at) "
            "SELECT 'old-' || gen_random_uuid(), 'arn:t', now() - interval '1 day' "
            "FROM generate_series(1, %s)", [PRUNE_BATCH + 50])
    before = int(str(_control(f"SELECT count(*) FROM control.sns_messages WHERE {old}")))
    foreign = {"eventType": "Delivery", "mail": {"timestamp": "2027-01-01T00:00:00Z", "messageId": "x",
                                                 "tags": {}}}
    assert _post(hook, sns_signer.notification(foreign)) == 200
    assert _control(f"SELECT count(*) FROM control.sns_messages WHERE {old}") == before - PRUNE_BATCH
    assert _post(hook, sns_signer.notification(foreign)) == 200
    after = _control(f"SELECT count(*) FROM control.sns_messages WHERE {old}")
    assert after == max(0, before - 2 * PRUNE_BATCH)


def test_delivery_then_complaint_move_the_delivery_and_suppress_the_address(
    tenant: Tenant, ses: SesOutbox, hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    delivery_id, provider_id = _sent_delivery(tenant, ses)
    assert _status(tenant, delivery_id) == "accepted"
    delivered = sns_signer.notification(ses_event("Delivery", tenant.slug, delivery_id, provider_id))
    assert _post(hook, delivered) == 200
    assert _status(tenant, delivery_id) == "delivered"
    complaint = sns_signer.notification(ses_event(
        "Complaint", tenant.slug, delivery_id, provider_id, complaint={"complaintFeedbackType": "abuse"}))
    assert _post(hook, complaint) == 200
    assert _status(tenant, delivery_id) == "complained"
    assert scalar(tenant, "SELECT reason FROM suppressed_addresses") == "complaint"
    assert _events(tenant) == 2


def test_a_hard_bounce_suppresses_the_address_for_every_later_send(
    tenant: Tenant, ses: SesOutbox, hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    delivery_id, provider_id = _sent_delivery(tenant, ses)
    bounce = sns_signer.notification(ses_event(
        "Bounce", tenant.slug, delivery_id, provider_id,
        bounce={"bounceType": "Permanent", "bounceSubType": "General"}))
    assert _post(hook, bounce) == 200
    assert _status(tenant, delivery_id) == "bounced"
    # The client's next reminder (d1) goes to the same address: suppressed, never sent.
    run_scan(tenant.slug, AS_OF + timedelta(days=6))
    later = int(scalar(tenant, "SELECT max(id) FROM notification_deliveries"))
    assert later != delivery_id
    deliver_email(tenant.slug, later)
    assert _status(tenant, later) == "cancelled"
    assert "suppressed" in str(scalar(tenant, "SELECT status_reason FROM notification_deliveries "
                                              "WHERE id = %s", later))
    assert len(ses.sent()) == 1


def test_a_transient_bounce_is_recorded_without_suppressing(
    tenant: Tenant, ses: SesOutbox, hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    delivery_id, provider_id = _sent_delivery(tenant, ses)
    soft = sns_signer.notification(ses_event(
        "Bounce", tenant.slug, delivery_id, provider_id, bounce={"bounceType": "Transient"}))
    assert _post(hook, soft) == 200
    assert scalar(tenant, "SELECT count(*) FROM suppressed_addresses") == 0


def _refused(tenant: Tenant, hook: TestClient[Litestar], message: dict[str, object],
             delivery_id: int) -> None:
    before = (_status(tenant, delivery_id), _events(tenant))
    assert _post(hook, message) == 403
    assert (_status(tenant, delivery_id), _events(tenant)) == before
    assert scalar(tenant, "SELECT count(*) FROM suppressed_addresses") == 0


def test_unsigned_forged_untrusted_stale_and_replayed_messages_get_403_and_change_nothing(
    tenant: Tenant, ses: SesOutbox, hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    delivery_id, provider_id = _sent_delivery(tenant, ses)
    bounce = ses_event("Bounce", tenant.slug, delivery_id, provider_id,
                       bounce={"bounceType": "Permanent"})
    good = sns_signer.notification(bounce)

    unsigned = {k: v for k, v in good.items() if k != "Signature"}
    _refused(tenant, hook, unsigned, delivery_id)

    tampered = {**good, "Message": json.dumps({**bounce, "eventType": "Complaint"})}
    _refused(tenant, hook, tampered, delivery_id)

    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = sns_signer.sign({k: v for k, v in good.items() if k != "Signature"}, key=other_key)
    _refused(tenant, hook, forged, delivery_id)

    untrusted = sns_signer.sign({**{k: v for k, v in good.items() if k != "Signature"},
                                 "SigningCertURL": "http://attacker.example/cert.pem"})
    _refused(tenant, hook, untrusted, delivery_id)

    stale = sns_signer.notification(bounce, at=datetime.now(UTC) - timedelta(hours=2))
    _refused(tenant, hook, stale, delivery_id)

    assert _post(hook, good) == 200  # the genuine message, once
    assert _status(tenant, delivery_id) == "bounced"
    events = _events(tenant)
    assert _post(hook, good) == 403  # the same message again: a replay
    assert _events(tenant) == events


def test_malformed_bodies_are_refused_with_400(hook: TestClient[Litestar], sns_signer: SnsSigner) -> None:
    assert hook.post("/hooks/ses", content="not json").status_code == 400
    assert hook.post("/hooks/ses", content="[1, 2]").status_code == 400
    assert hook.post("/hooks/ses", content="x" * 300_000).status_code == 413  # over the body limit
    assert hook.post("/hooks/ses", content="[" * 50_000 + "]" * 50_000).status_code == 400
    assert hook.post("/hooks/ses", content=b"\xff\xfe{").status_code == 400
    assert hook.post("/hooks/ses", content=json.dumps({"Type": {"a": [1]}})).status_code == 403
    assert sns_signer.requests == []


def test_a_deeply_nested_message_inside_a_genuine_envelope_is_acknowledged_and_ignored(
    tenant: Tenant, hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    message = sns_signer.sign({**{k: v for k, v in sns_signer.notification({}).items() if k != "Signature"},
                               "Message": "[" * 50_000 + "]" * 50_000})
    assert _post(hook, message) == 200
    assert _events(tenant) == 0


def test_events_for_mail_we_did_not_tag_are_acknowledged_and_ignored(
    tenant: Tenant, hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    foreign = sns_signer.notification({"eventType": "Delivery", "mail": {
        "timestamp": "2027-01-01T00:00:00Z", "messageId": "x", "tags": {}}})
    assert _post(hook, foreign) == 200
    assert _events(tenant) == 0
    with tenant_tx(tenant.slug) as tx:
        assert tx.conn.execute("SELECT count(*) FROM notification_deliveries").fetchone() == (0,)
