"""The Webhooks page: an administrator adds an endpoint, sends it a test event that a local
receiver verifies, reads the delivery log (status, latency, code), redelivers, rotates the
secret, disables and enables it. Bad URLs get a message; members and other tenants' ids get
nothing."""

from __future__ import annotations

import re

from db.delivery.webhook_endpoints import create_endpoint, get_endpoint
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from tests.integration.builders import scalar
from tests.integration.conftest import RunningWorker, wait_until
from tests.integration.portal_support import PASSWORD, People, PortalClient, csrf_token, signed_in
from tests.support.webhook_receiver import WebhookReceiver


def _add(portal: PortalClient, url: str, **fields: str) -> object:
    page = portal.get("/webhooks")
    assert page.status_code == 200
    return portal.post("/webhooks/new", data={"_csrf_token": csrf_token(page.text), "url": url,
                                              "description": "case system", **fields},
                       follow_redirects=False)


def _post(portal: PortalClient, path: str, page_path: str) -> int:
    token = csrf_token(portal.get(page_path).text)
    return int(portal.post(path, data={"_csrf_token": token}, follow_redirects=False).status_code)


def test_an_admin_adds_an_endpoint_tests_it_reads_the_log_and_redelivers(
    portal: PortalClient, people: People, worker: RunningWorker,
) -> None:
    signed_in(portal, people, people.admin)
    with WebhookReceiver() as receiver:
        added = _add(portal, receiver.url, notice_created="on", webhook_test="on")
        assert added.status_code == 303  # type: ignore[attr-defined]
        location = added.headers["location"]  # type: ignore[attr-defined]
        endpoint_id = int(re.findall(r"/webhooks/(\d+)", location)[0])
        page = portal.get(location).text
        assert "Endpoint added" in page and receiver.url in page
        with tenant_tx(people.tenant.slug) as tx:
            receiver.secrets.append(get_endpoint(tx, endpoint_id).secret)

        assert _post(portal, f"/webhooks/{endpoint_id}/test", f"/webhooks/{endpoint_id}") == 303
        wait_until(lambda: len(receiver.calls()) == 1, "the test event at the receiver")
        [call] = receiver.calls()
        assert call.verified and b"webhook.test" in call.body and people.admin.email.encode() in call.body
        wait_until(lambda: "HTTP 200" in portal.get(f"/webhooks/{endpoint_id}").text, "the log to show it")
        log = portal.get(f"/webhooks/{endpoint_id}").text
        assert "delivered" in log and " ms" in log and "Redeliver" in log

        delivery_id = int(scalar(people.tenant, "SELECT id FROM webhook_deliveries"))
        assert _post(portal, f"/webhooks/{endpoint_id}/deliveries/{delivery_id}/redeliver",
                     f"/webhooks/{endpoint_id}") == 303
        wait_until(lambda: len(receiver.calls()) == 2, "the redelivery")
        assert receiver.calls()[1].webhook_id == call.webhook_id
    listing = portal.get("/webhooks").text
    assert receiver.url in listing and "Healthy" in listing


def test_rotating_disabling_and_enabling_an_endpoint(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.admin)
    with tenant_tx(people.tenant.slug) as tx:
        endpoint = create_endpoint(tx, "https://hooks.example.com/in", ["webhook.test"], allow_private=False)
    path = f"/webhooks/{endpoint.id}"
    assert _post(portal, f"{path}/rotate", path) == 303
    page = portal.get(f"{path}?done=rotated").text
    assert "The previous secret still signs beside it until" in page
    assert endpoint.secret not in page  # the new secret is shown, the old one no longer
    assert _post(portal, f"{path}/disable", path) == 303
    assert "Disabled" in portal.get(path).text and "Send a test event" not in portal.get(path).text
    assert _post(portal, f"{path}/enable", path) == 303
    assert "Healthy" in portal.get(path).text


def test_a_bad_url_gets_a_message_and_nothing_is_written(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.admin)
    for url in ("ftp://hooks.example.com/", "https://user:secret@hooks.example.com/", "not a url"):
        answer = _add(portal, url, webhook_test="on")
        assert answer.status_code == 400, url  # type: ignore[attr-defined]
    assert _add(portal, "https://hooks.example.com/").status_code == 400  # type: ignore[attr-defined]
    assert scalar(people.tenant, "SELECT count(*) FROM webhook_endpoints") == 0


def test_members_and_other_tenants_ids_get_nothing(
    portal: PortalClient, people: People, make_tenant: object,
) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        member = create_user(tx, "member@northwind.example", Role.MEMBER, PASSWORD)
    other: Tenant = make_tenant()  # type: ignore[operator]
    with tenant_tx(other.slug) as tx:
        theirs = create_endpoint(tx, "https://hooks.example.org/", ["webhook.test"], allow_private=False)
    signed_in(portal, people, member)
    assert portal.get("/webhooks").status_code == 403
    portal.cookies.clear()
    signed_in(portal, people, people.admin)
    assert portal.get(f"/webhooks/{theirs.id}").status_code == 404
    assert _post(portal, f"/webhooks/{theirs.id}/test", "/webhooks") == 404


def test_the_channels_page_shows_each_channel_with_its_deliveries_and_failures(
    portal: PortalClient, people: People,
) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        endpoint = create_endpoint(tx, "https://hooks.example.com/in", ["webhook.test"], allow_private=False)
        tx.conn.execute("INSERT INTO webhook_deliveries (endpoint_id, event_kind, payload, status, "
                        "status_reason) VALUES (%s, 'webhook.test', '{}', 'pending', NULL)", [endpoint.id])
    signed_in(portal, people, people.admin)
    page = portal.get("/channels")
    assert page.status_code == 200
    webhooks_row = page.text.split('id="channel-webhook"')[1].split("</tr>")[0]
    assert "1 of 1 endpoint enabled." in webhooks_row and "On" in webhooks_row
    assert 'id="channel-email"' in page.text and 'id="channel-in_app"' in page.text
    with tenant_tx(people.tenant.slug) as tx:
        member = create_user(tx, "viewer@northwind.example", Role.MEMBER, PASSWORD)
    portal.cookies.clear()
    signed_in(portal, people, member)
    assert portal.get("/channels").status_code == 403
