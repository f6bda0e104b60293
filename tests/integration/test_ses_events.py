"""POST /hooks/ses through the real app: SNS messages signed by a test key whose
certificate the hook fetches from a trusted (test) address. Unsigned, forged, untrusted,
stale and replayed messages get 403 and change nothing; valid events move the delivery
and bounces and complaints suppress the address for every later send."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from litestar import Litestar
from litestar.testing import TestClient

from actors.email import deliver_email
from actors.scan import run_scan
from db.tenancy import Tenant, tenant_tx
from portal.app import create_app
from tests.integration.builders import add_client, scalar
from tests.integration.conftest import SesOutbox
from tests.support.sns_signer import SnsSigner, ses_event

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def hook(sns_signer: SnsSigner) -> Iterator[TestClient[Litestar]]:
    with TestClient(app=create_app()) as client:
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


def test_a_subscription_confirmation_is_verified_and_confirmed(
    hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    assert _post(hook, sns_signer.subscription()) == 200
    assert sns_signer.confirmations == ["/confirm?Token=token-1"]


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


def test_malformed_bodies_are_refused_with_400(hook: TestClient[Litestar]) -> None:
    assert hook.post("/hooks/ses", content="not json").status_code == 400
    assert hook.post("/hooks/ses", content="[1, 2]").status_code == 400
    assert hook.post("/hooks/ses", content="x" * 300_000).status_code == 413  # over the body limit


def test_events_for_mail_we_did_not_tag_are_acknowledged_and_ignored(
    tenant: Tenant, hook: TestClient[Litestar], sns_signer: SnsSigner
) -> None:
    foreign = sns_signer.notification({"eventType": "Delivery", "mail": {
        "timestamp": "2027-01-01T00:00:00Z", "messageId": "x", "tags": {}}})
    assert _post(hook, foreign) == 200
    assert _events(tenant) == 0
    with tenant_tx(tenant.slug) as tx:
        assert tx.conn.execute("SELECT count(*) FROM notification_deliveries").fetchone() == (0,)
