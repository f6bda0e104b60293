"""The preference centre, the organisation defaults page and the unsubscribe link, through
the real app over real PostgreSQL and Redis."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from db.people.preferences import resolve_preference, save_category_default
from db.people.users import User, create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.delivery.preferences import CATEGORIES, Frequency, Preference
from domain.delivery.unsubscribe import unsubscribe_token
from domain.people.identity import Role
from tests.integration.conftest import new_tenant, remove_tenant
from tocsin.boot.web import build_app
from tocsin.core.keys import signing_keys
from tocsin.core.settings import load_settings

PASSWORD = "correct horse battery"
HTMX = {"HX-Request": "true", "HX-Current-URL": "http://testserver.local/preferences"}
LICENCE = "license_expiring"
PortalClient = TestClient[Litestar]


@pytest.fixture
def portal() -> Iterator[PortalClient]:
    with TestClient(app=build_app()) as client:
        yield client


def _user(tenant: Tenant, email: str, role: Role = Role.MEMBER) -> User:
    with tenant_tx(tenant.slug) as tx:
        return create_user(tx, email, role, PASSWORD)


def _csrf(html: str) -> str:
    match = re.search(r'name="_csrf_token" value="([^"]+)"', html)
    assert match
    return match.group(1)


def _sign_in(portal: PortalClient, tenant: Tenant, user: User) -> str:
    token = _csrf(portal.get("/login").text)
    response = portal.post("/login", data={"organisation": tenant.slug, "email": user.email,
                                           "password": PASSWORD, "next": "/preferences",
                                           "_csrf_token": token}, follow_redirects=False)
    assert response.status_code == 303
    page = portal.get("/preferences")
    assert page.status_code == 200
    return _csrf(page.text)


def _email_on(tenant: Tenant, user: User, category: str = LICENCE) -> bool:
    with tenant_tx(tenant.slug) as tx:
        return resolve_preference(tx, user.id, category).preference.email


def _lock(tenant: Tenant, admin: User, category: str = LICENCE) -> None:
    with tenant_tx(tenant.slug) as tx:
        save_category_default(tx, category, Preference(True, True, Frequency.INSTANT), locked=True,
                              lock_reason="Our licence terms require these notices", critical=False,
                              by_user_id=admin.id)


def _token(tenant: Tenant, user: User, category: str = LICENCE, now: datetime | None = None) -> str:
    key = signing_keys(load_settings()).unsubscribe.current
    return unsubscribe_token(key, tenant.slug, user.id, category, now or datetime.now(UTC))


def test_the_preference_centre_shows_the_matrix_and_saves_a_row_with_an_inline_confirmation(
    portal: PortalClient, tenant: Tenant
) -> None:
    member = _user(tenant, "member@example.com")
    csrf = _sign_in(portal, tenant, member)
    page = portal.get("/preferences").text
    assert 'href="/preferences" aria-current="page"' in page
    assert page.count('class="pref-row') == len(CATEGORIES)
    assert '<label for="license_expiring-email">' in page and 'list="zone-list"' in page

    response = portal.post(f"/preferences/categories/{LICENCE}", data={"in_app": "on", "frequency": "weekly"},
                           headers=HTMX | {"x-csrftoken": csrf})
    assert response.status_code == 200
    assert "Saved" in response.text and 'id="pref-license_expiring"' in response.text
    with tenant_tx(tenant.slug) as tx:
        resolved = resolve_preference(tx, member.id, LICENCE)
    assert resolved.preference == Preference(True, False, Frequency.WEEKLY)
    reloaded = portal.get("/preferences").text
    row = reloaded[reloaded.index('id="pref-license_expiring"'):]
    row = row[:row.index("</form>")]
    assert 'value="weekly" selected' in row and 'id="license_expiring-email" name="email" >' in row


def test_bad_input_is_refused_next_to_the_field_and_nothing_is_saved(
    portal: PortalClient, tenant: Tenant
) -> None:
    member = _user(tenant, "member@example.com")
    csrf = _sign_in(portal, tenant, member)
    headers = HTMX | {"x-csrftoken": csrf}
    zone = portal.post("/preferences/schedule", headers=headers, data={
        "quiet_start": "22:00", "quiet_end": "07:00", "digest_time": "08:00", "weekly_day": "1",
        "time_zone": "Mars/Olympus_Mons"})
    assert zone.status_code == 422
    assert 'id="time_zone-error"' in zone.text and "unknown time zone" in zone.text.lower()
    same = portal.post("/preferences/schedule", headers=headers, data={
        "quiet_start": "07:00", "quiet_end": "07:00", "digest_time": "08:00", "weekly_day": "1",
        "time_zone": "Europe/Berlin"})
    assert same.status_code == 422 and 'id="quiet_end-error"' in same.text
    unknown = portal.post("/preferences/categories/spam", headers=headers, data={"frequency": "instant"})
    assert unknown.status_code == 400 and "unknown category" in unknown.text.lower()
    frequency = portal.post(f"/preferences/categories/{LICENCE}", headers=headers,
                            data={"frequency": "hourly"})
    assert frequency.status_code == 422 and 'id="license_expiring-error"' in frequency.text
    with tenant_tx(tenant.slug) as tx:
        assert tx.conn.execute("SELECT count(*) FROM delivery_schedules").fetchone() == (0,)
        assert tx.conn.execute("SELECT count(*) FROM notification_preferences").fetchone() == (0,)

    ok = portal.post("/preferences/schedule", headers=headers, data={
        "quiet_start": "22:00", "quiet_end": "07:00", "digest_time": "08:30", "weekly_day": "5",
        "time_zone": "Pacific/Kiritimati"})
    assert ok.status_code == 200 and "Saved" in ok.text and "Pacific/Kiritimati" in ok.text


def test_a_locked_category_is_disabled_with_the_reason_and_cannot_be_changed(
    portal: PortalClient, tenant: Tenant
) -> None:
    admin = _user(tenant, "admin@example.com", Role.ADMIN)
    member = _user(tenant, "member@example.com")
    _lock(tenant, admin)
    csrf = _sign_in(portal, tenant, member)
    page = portal.get("/preferences").text
    row = page[page.index('id="pref-license_expiring"'):]
    assert "disabled" in row[:row.index("</form>")] and "Our licence terms require these notices" in row
    refused = portal.post(f"/preferences/categories/{LICENCE}", data={"frequency": "off"},
                          headers=HTMX | {"x-csrftoken": csrf})
    assert refused.status_code == 422 and "requires this notification" in refused.text
    assert _email_on(tenant, member)


def test_only_admins_edit_the_organisation_defaults_and_a_lock_needs_a_reason(
    portal: PortalClient, tenant: Tenant
) -> None:
    member = _user(tenant, "member@example.com")
    admin = _user(tenant, "admin@example.com", Role.ADMIN)
    _sign_in(portal, tenant, member)
    assert portal.get("/preferences/defaults").status_code == 404
    portal.post("/logout", headers={"x-csrftoken": _csrf(portal.get("/preferences").text)})

    csrf = _sign_in(portal, tenant, admin)
    assert portal.get("/preferences/defaults").status_code == 200
    headers = HTMX | {"x-csrftoken": csrf}
    no_reason = portal.post(f"/preferences/defaults/{LICENCE}", headers=headers,
                            data={"in_app": "on", "email": "on", "frequency": "instant", "locked": "on"})
    assert no_reason.status_code == 422 and "say why" in no_reason.text.lower()
    saved = portal.post(f"/preferences/defaults/{LICENCE}", headers=headers, data={
        "in_app": "on", "email": "on", "frequency": "instant", "locked": "on", "critical": "on",
        "lock_reason": "Required by contract"})
    assert saved.status_code == 200 and "Saved" in saved.text
    with tenant_tx(tenant.slug) as tx:
        resolved = resolve_preference(tx, member.id, LICENCE)
    assert (resolved.locked, resolved.critical, resolved.lock_reason) == (True, True, "Required by contract")


def test_a_valid_unsubscribe_link_confirms_then_turns_email_off_in_one_click_without_login(
    portal: PortalClient, tenant: Tenant
) -> None:
    member = _user(tenant, "member@example.com")
    token = _token(tenant, member)
    page = portal.get(f"/unsubscribe/{token}")
    assert page.status_code == 200 and "Unsubscribe from these emails" in page.text
    assert _email_on(tenant, member)  # GET changes nothing (link scanners follow links)
    done = portal.post(f"/unsubscribe/{token}", content=b"List-Unsubscribe=One-Click",
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert done.status_code == 200 and "You are unsubscribed" in done.text
    assert not _email_on(tenant, member)
    with tenant_tx(tenant.slug) as tx:
        assert resolve_preference(tx, member.id, LICENCE).preference.in_app
        assert resolve_preference(tx, member.id, "report_ready").preference.email
    assert "already unsubscribed" in portal.get(f"/unsubscribe/{token}").text


def test_tampered_and_expired_unsubscribe_links_get_a_clear_page_and_change_nothing(
    portal: PortalClient, tenant: Tenant
) -> None:
    member = _user(tenant, "member@example.com")
    token = _token(tenant, member)
    payload, signature = token.split(".")
    other_category = _token(tenant, member, "report_ready").split(".")[0]
    tampered = [f"{other_category}.{signature}", f"{payload}.{signature[:-2]}xx", "nonsense"]
    for bad in tampered:
        response = portal.post(f"/unsubscribe/{bad}", content=b"List-Unsubscribe=One-Click",
                               headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert response.status_code == 400 and "not valid" in response.text
    expired = _token(tenant, member, now=datetime.now(UTC) - timedelta(days=61))
    response = portal.post(f"/unsubscribe/{expired}")
    assert response.status_code == 400 and "expired" in response.text
    assert "expired" in portal.get(f"/unsubscribe/{expired}").text
    assert _email_on(tenant, member) and _email_on(tenant, member, "report_ready")


def test_an_unsubscribe_token_acts_only_in_its_own_tenant(portal: PortalClient, tenant: Tenant) -> None:
    other = new_tenant()
    try:
        mine = _user(tenant, "same@example.com")
        theirs = _user(other, "same@example.com")
        response = portal.post(f"/unsubscribe/{_token(other, theirs)}")
        assert response.status_code == 200
        assert not _email_on(other, theirs)
        assert _email_on(tenant, mine)
        # A token naming a user the tenant does not have, or a tenant that does not exist.
        ghost = User(theirs.id + 1000, "ghost@example.com", "", Role.MEMBER, None, True)
        for token in (_token(tenant, ghost),
                      unsubscribe_token(signing_keys(load_settings()).unsubscribe.current,
                                        "nosuchtenant", mine.id, LICENCE, datetime.now(UTC))):
            refused = portal.post(f"/unsubscribe/{token}")
            assert refused.status_code == 400 and "not valid" in refused.text
        assert _email_on(tenant, mine)
    finally:
        remove_tenant(other)


def test_unsubscribing_from_a_locked_category_says_why_and_changes_nothing(
    portal: PortalClient, tenant: Tenant
) -> None:
    admin = _user(tenant, "admin@example.com", Role.ADMIN)
    member = _user(tenant, "member@example.com")
    _lock(tenant, admin)
    token = _token(tenant, member)
    assert "Our licence terms require these notices" in portal.get(f"/unsubscribe/{token}").text
    response = portal.post(f"/unsubscribe/{token}")
    assert response.status_code == 200
    assert "can't be switched off" in response.text
    assert "Our licence terms require these notices" in response.text
    assert _email_on(tenant, member)
