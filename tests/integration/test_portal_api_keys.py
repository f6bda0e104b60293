"""The API keys page: an administrator creates a key (shown once, in the answer that made
it), sees it listed with its use, and revokes it after a confirmation; the events API takes
the key until then and refuses it after. Team members may not manage keys."""

from __future__ import annotations

import re
from collections.abc import Callable

from db.events.api_keys import create_api_key, list_api_keys
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from tests.integration.intake_support import case_event, events_of, fraud_desk
from tests.integration.portal_support import (
    HTMX,
    PASSWORD,
    People,
    PortalClient,
    csrf_token,
    sign_in,
    signed_in,
)

KEY = re.compile(r'value="(tsk_[A-Za-z0-9_\-]+)"')


def create_key(portal: PortalClient, label: str, *, htmx: bool = False) -> tuple[str, str]:
    """Post the form as the page carries it; the answer's HTML and the key shown in it."""
    page = portal.get("/api-keys")
    assert page.status_code == 200
    response = portal.post("/api-keys/new", data={"_csrf_token": csrf_token(page.text), "label": label},
                           headers=HTMX if htmx else {})
    assert response.status_code == 201, response.text
    match = KEY.search(response.text)
    assert match, "the new key is not shown"
    return response.text, match.group(1)


def send_event(portal: PortalClient, key: str, external_id: str) -> int:
    return portal.post("/api/v1/events", headers={"Authorization": f"Bearer {key}"},
                       json=case_event(external_id)).status_code


def test_a_created_key_works_against_the_events_api_and_is_listed_with_its_last_use(
    portal: PortalClient, people: People
) -> None:
    fraud_desk(people.tenant)
    signed_in(portal, people, people.admin)
    html, key = create_key(portal, "Case system (production)")
    assert "This is the only time it is shown" in html and "Case system (production)" in html

    assert send_event(portal, key, "C-1") == 201
    assert [e["external_id"] for e in events_of(people.tenant)] == ["C-1"]

    [record] = list_api_keys(people.tenant.slug)
    assert record.last_used_at is not None and key.startswith(record.prefix)
    listing = portal.get("/api-keys").text
    assert record.prefix in listing and "Never" not in listing and "Active" in listing


def test_a_key_is_shown_once_and_never_again(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.admin)
    html, key = create_key(portal, "Case system", htmx=True)
    assert html.lstrip().startswith('<div id="keys">')  # htmx gets the keys section only
    assert key in html

    again = portal.get("/api-keys").text
    assert key not in again and key[:12] in again
    assert "This is the only time it is shown" not in again
    # Only the hash and the prefix are kept: the key itself is in no column.
    with tenant_tx(people.tenant.slug) as tx:
        row = tx.conn.execute("SELECT count(*) FROM control.api_keys WHERE key_hash = %s OR prefix = %s",
                              [key, key]).fetchone()
    assert row is not None and row[0] == 0


def test_a_revoked_key_gets_401_after_the_admin_confirms(portal: PortalClient, people: People) -> None:
    fraud_desk(people.tenant)
    signed_in(portal, people, people.admin)
    _, key = create_key(portal, "Old system")
    [record] = list_api_keys(people.tenant.slug)
    assert send_event(portal, key, "C-1") == 201

    confirm = portal.get(f"/api-keys/{record.id}/confirm-revoke", headers=HTMX)
    assert confirm.status_code == 200 and "Revoke “Old system”?" in confirm.text
    assert list_api_keys(people.tenant.slug)[0].revoked_at is None  # asking is not revoking
    page = portal.get(f"/api-keys/{record.id}/confirm-revoke")  # without JavaScript: a page
    assert page.status_code == 200 and "This cannot be undone" in page.text

    done = portal.post(f"/api-keys/{record.id}/revoke", data={"_csrf_token": csrf_token(page.text)},
                       follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/api-keys?done=revoked"
    listing = portal.get(done.headers["location"]).text
    assert "Key revoked" in listing and "Revoked " in listing
    assert send_event(portal, key, "C-2") == 401
    assert [e["external_id"] for e in events_of(people.tenant)] == ["C-1"]


def test_a_revoke_without_the_form_token_changes_nothing(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.admin)
    create_key(portal, "Case system")
    [record] = list_api_keys(people.tenant.slug)
    response = portal.post(f"/api-keys/{record.id}/revoke", follow_redirects=False)
    assert response.status_code == 403
    assert list_api_keys(people.tenant.slug)[0].revoked_at is None


def test_a_team_member_may_not_see_create_or_revoke_keys(portal: PortalClient, people: People) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        create_user(tx, "member@tenant.example", Role.MEMBER, PASSWORD)
    signed_in(portal, people, people.admin)
    create_key(portal, "Case system")
    [record] = list_api_keys(people.tenant.slug)
    portal.cookies.clear()
    assert sign_in(portal, people.tenant.slug, "member@tenant.example").status_code == 303
    inbox = portal.get("/").text
    assert 'href="/api-keys"' not in inbox

    page = portal.get("/api-keys")
    assert page.status_code == 403 and "Only administrators manage API keys" in page.text
    token = csrf_token(inbox)
    assert portal.post("/api-keys/new", data={"_csrf_token": token, "label": "mine"}).status_code == 403
    assert portal.get(f"/api-keys/{record.id}/confirm-revoke").status_code == 403
    assert portal.post(f"/api-keys/{record.id}/revoke", data={"_csrf_token": token}).status_code == 403
    keys = list_api_keys(people.tenant.slug)
    assert [(k.label, k.revoked_at) for k in keys] == [("Case system", None)]


def test_a_client_user_may_not_manage_keys(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.client_user)
    assert portal.get("/api-keys").status_code == 403


def test_a_key_without_a_label_is_refused_with_a_reason(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.admin)
    page = portal.get("/api-keys")
    response = portal.post("/api-keys/new", data={"_csrf_token": csrf_token(page.text), "label": "  "})
    assert response.status_code == 400 and "give the key a label" in response.text.lower()
    assert list_api_keys(people.tenant.slug) == []


def test_a_label_with_a_control_character_is_refused_with_a_reason(
        portal: PortalClient, people: People) -> None:
    """The NUL character, which PostgreSQL cannot store, once made this form answer 500
    (found by tests/fuzz/test_openapi_fuzz.py)."""
    signed_in(portal, people, people.admin)
    page = portal.get("/api-keys")
    for label in ("case\x00system", "case\tsystem"):
        response = portal.post("/api-keys/new", data={"_csrf_token": csrf_token(page.text), "label": label})
        assert response.status_code == 400 and "control characters" in response.text
    assert list_api_keys(people.tenant.slug) == []


def test_a_key_of_another_tenant_cannot_be_revoked(
    portal: PortalClient, people: People, make_tenant: Callable[..., Tenant]
) -> None:
    other = make_tenant()
    foreign, _ = create_api_key(other.slug, "theirs")
    html = signed_in(portal, people, people.admin)
    assert portal.get(f"/api-keys/{foreign.id}/confirm-revoke").status_code == 404
    response = portal.post(f"/api-keys/{foreign.id}/revoke", data={"_csrf_token": csrf_token(html)})
    assert response.status_code == 404
    assert list_api_keys(other.slug)[0].revoked_at is None
