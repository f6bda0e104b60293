"""Single sign-on through the portal over HTTP, against a real OpenID Connect provider on
127.0.0.1 (tests/support/oidc_provider.py): an existing user and a provisioned one signed
in; every untrustworthy answer refused with a plain message, nothing signed in, and an
audit row; a state used twice refused; password sign-in turned off."""

from __future__ import annotations

import httpx
import pytest

from db.people.sign_in_settings import set_password_sign_in, sign_in_settings
from db.platform.tenancy import tenant_tx
from domain.people.sign_in import SignInRefusal
from portal.routes.single_sign_on import STATE_COOKIE
from tests.integration.conftest import use_settings
from tests.integration.portal_support import People, PortalClient, csrf_token, sign_in
from tests.integration.sign_in_support import (
    last_audit,
    signed_in_as,
    sso_sign_in,
    start_at_provider,
    use_provider,
    way_back,
)
from tests.support.oidc_provider import Account, LocalIdentityProvider, Misbehaviour


def test_an_existing_user_signs_in_with_single_sign_on_using_pkce_state_and_nonce(
    portal: PortalClient, people: People, idp: LocalIdentityProvider
) -> None:
    use_provider(people.tenant, idp)
    idp.account = Account(people.admin.email)
    page = portal.get(f"/login?organisation={people.tenant.slug}").text
    assert "Sign in with Acme Login" in page

    answer = sso_sign_in(portal, people.tenant.slug)

    assert answer.status_code == 303 and answer.headers["location"] == "/"
    assert signed_in_as(portal) == people.admin.email
    assert idp.token_requests[-1]["code_verifier"]  # the provider checked PKCE against it
    assert last_audit(people.tenant, "sign_in") == ("sign_in", {"method": "oidc"})


def test_a_new_person_from_an_allowed_domain_is_made_a_member_on_first_sign_in(
    portal: PortalClient, people: People, idp: LocalIdentityProvider
) -> None:
    use_provider(people.tenant, idp, provision=True)
    idp.account = Account("newcomer@tenant.example")

    assert sso_sign_in(portal, people.tenant.slug).status_code == 303

    assert signed_in_as(portal) == "newcomer@tenant.example"
    with tenant_tx(people.tenant.slug) as tx:
        role = tx.conn.execute("SELECT role FROM users WHERE email = 'newcomer@tenant.example'").fetchone()
    assert role == ("member",)
    assert last_audit(people.tenant, "user.provision")[1]["method"] == "oidc"


def _refused(portal: PortalClient, people: People, answer: httpx.Response,
             reason: SignInRefusal) -> None:
    assert answer.status_code == 400
    assert reason.message in answer.text.replace("&#39;", "'")
    assert signed_in_as(portal) is None
    action, after = last_audit(people.tenant, "sign_in")
    assert (action, after["reason"]) == ("sign_in.refused", reason.value)


@pytest.mark.parametrize(("misbehaviour", "reason"), [
    ("wrong_issuer", SignInRefusal.WRONG_ISSUER),
    ("wrong_audience", SignInRefusal.WRONG_AUDIENCE),
    ("bad_signature", SignInRefusal.BAD_SIGNATURE),
    ("expired", SignInRefusal.EXPIRED_TOKEN),
    ("wrong_nonce", SignInRefusal.NONCE_MISMATCH),
])
def test_an_id_token_that_cannot_be_trusted_signs_nobody_in_and_is_audited(
    portal: PortalClient, people: People, idp: LocalIdentityProvider,
    misbehaviour: Misbehaviour, reason: SignInRefusal,
) -> None:
    use_provider(people.tenant, idp)
    idp.account = Account(people.admin.email)
    idp.misbehave = misbehaviour

    _refused(portal, people, sso_sign_in(portal, people.tenant.slug), reason)


def test_an_email_the_provider_has_not_verified_is_refused(
    portal: PortalClient, people: People, idp: LocalIdentityProvider
) -> None:
    use_provider(people.tenant, idp)
    idp.account = Account(people.admin.email, email_verified=False)

    _refused(portal, people, sso_sign_in(portal, people.tenant.slug), SignInRefusal.EMAIL_NOT_VERIFIED)


def test_an_email_outside_the_allowed_domains_is_refused_even_with_provisioning_on(
    portal: PortalClient, people: People, idp: LocalIdentityProvider
) -> None:
    use_provider(people.tenant, idp, provision=True)
    idp.account = Account("stranger@elsewhere.example")

    _refused(portal, people, sso_sign_in(portal, people.tenant.slug), SignInRefusal.DOMAIN_NOT_ALLOWED)
    with tenant_tx(people.tenant.slug) as tx:
        found = tx.conn.execute("SELECT 1 FROM users WHERE email = 'stranger@elsewhere.example'")
        assert found.fetchone() is None


def test_a_person_without_an_account_is_refused_when_provisioning_is_off(
    portal: PortalClient, people: People, idp: LocalIdentityProvider
) -> None:
    use_provider(people.tenant, idp, provision=False)
    idp.account = Account("newcomer@tenant.example")

    _refused(portal, people, sso_sign_in(portal, people.tenant.slug), SignInRefusal.NO_ACCOUNT)


def test_a_state_used_once_already_is_refused_when_replayed(
    portal: PortalClient, people: People, idp: LocalIdentityProvider
) -> None:
    use_provider(people.tenant, idp)
    idp.account = Account(people.admin.email)
    started = start_at_provider(portal, people.tenant.slug)
    callback = way_back(started)
    state_cookie = portal.cookies.get(STATE_COOKIE)
    assert portal.get(callback, follow_redirects=False).status_code == 303
    portal.cookies.clear()  # signed out; the replayed link comes with its state cookie
    portal.cookies.set(STATE_COOKIE, str(state_cookie))

    _refused(portal, people, portal.get(callback, follow_redirects=False), SignInRefusal.UNKNOWN_STATE)


def test_a_way_back_from_another_browser_is_refused(
    portal: PortalClient, people: People, idp: LocalIdentityProvider
) -> None:
    use_provider(people.tenant, idp)
    idp.account = Account(people.admin.email)
    callback = way_back(start_at_provider(portal, people.tenant.slug))
    portal.cookies.clear()  # another browser: it never set out, so it holds no state cookie

    _refused(portal, people, portal.get(callback, follow_redirects=False), SignInRefusal.UNKNOWN_STATE)


def test_with_password_sign_in_off_a_password_is_refused_and_the_page_says_so(
    portal: PortalClient, people: People, idp: LocalIdentityProvider
) -> None:
    use_provider(people.tenant, idp)
    with tenant_tx(people.tenant.slug) as tx:
        set_password_sign_in(tx, False)

    answer = sign_in(portal, people.tenant.slug, people.admin.email)

    assert answer.status_code == 403
    assert "single sign-on only" in answer.text
    assert signed_in_as(portal) is None
    assert last_audit(people.tenant, "sign_in")[1]["reason"] == SignInRefusal.PASSWORD_OFF.value
    page = portal.get(f"/login?organisation={people.tenant.slug}").text
    assert 'id="password-off"' in page and 'name="password"' not in page
    idp.account = Account(people.admin.email)
    assert sso_sign_in(portal, people.tenant.slug).status_code == 303


def _as_admin(portal: PortalClient, people: People) -> str:
    assert sign_in(portal, people.tenant.slug, people.admin.email).status_code == 303
    return csrf_token(portal.get("/settings/sign-in").text)


def test_an_admin_cannot_turn_password_sign_in_off_without_single_sign_on(
    portal: PortalClient, people: People
) -> None:
    token = _as_admin(portal, people)

    answer = portal.post("/settings/sign-in/password", data={"_csrf_token": token, "password_enabled": "off"})

    assert answer.status_code == 400
    assert "set up single sign-on" in answer.text.lower()
    with tenant_tx(people.tenant.slug) as tx:
        assert sign_in_settings(tx).password_enabled


def test_an_admin_sets_up_the_provider_whose_secret_is_never_shown_back(
    portal: PortalClient, people: People, idp: LocalIdentityProvider
) -> None:
    token = _as_admin(portal, people)
    form = {"_csrf_token": token, "issuer": idp.issuer, "client_id": idp.client_id,
            "client_secret": idp.client_secret, "provider_name": "Acme Login",
            "allowed_domains": "tenant.example\nexample.org", "provision_members": "on"}

    saved = portal.post("/settings/sign-in/provider", data=form, follow_redirects=False)

    assert saved.status_code == 303
    page = portal.get("/settings/sign-in").text
    assert idp.issuer in page and idp.client_secret not in page
    with tenant_tx(people.tenant.slug) as tx:
        settings = sign_in_settings(tx)
    assert settings.allowed_domains == ("example.org", "tenant.example") and settings.provision_members
    _, after = last_audit(people.tenant, "settings.single_sign_on")
    assert after["client_secret"] == "changed" and idp.client_secret not in str(after)
    turned_off = portal.post("/settings/sign-in/password",
                             data={"_csrf_token": token, "password_enabled": "off"}, follow_redirects=False)
    assert turned_off.status_code == 303


def test_a_provider_that_does_not_answer_discovery_is_not_saved(
    portal: PortalClient, people: People, idp: LocalIdentityProvider
) -> None:
    token = _as_admin(portal, people)
    form = {"_csrf_token": token, "issuer": idp.issuer + "/no-such-realm", "client_id": "x",
            "client_secret": "y", "allowed_domains": "tenant.example"}

    answer = portal.post("/settings/sign-in/provider", data=form)

    assert answer.status_code == 400 and "discovery" in answer.text
    with tenant_tx(people.tenant.slug) as tx:
        assert not sign_in_settings(tx).oidc_configured


def test_a_member_cannot_open_the_sign_in_settings(portal: PortalClient, people: People) -> None:
    assert sign_in(portal, people.tenant.slug, people.client_user.email).status_code == 303

    assert portal.get("/settings/sign-in").status_code == 404


def test_the_password_forms_single_sign_on_button_leads_to_the_organisations_provider_button(
    portal: PortalClient, people: People, idp: LocalIdentityProvider
) -> None:
    use_provider(people.tenant, idp)
    token = csrf_token(portal.get("/login").text)

    answer = portal.post("/login/sso", data={"_csrf_token": token, "organisation": people.tenant.slug.upper(),
                                             "email": "", "password": "", "next": "/clients"},
                         follow_redirects=False)

    assert answer.headers["location"] == f"/login?organisation={people.tenant.slug}&next=%2Fclients&sso=1"
    assert "Sign in with Acme Login" in portal.get(answer.headers["location"]).text


def test_asking_for_single_sign_on_where_it_is_not_set_up_says_so(
    portal: PortalClient, people: People
) -> None:
    token = csrf_token(portal.get("/login").text)

    answer = portal.post("/login/sso", data={"_csrf_token": token, "organisation": people.tenant.slug})

    assert SignInRefusal.NOT_CONFIGURED.message in answer.text
    assert 'name="password"' in answer.text


def test_a_provider_on_a_private_address_is_refused_unless_allowed(
    portal: PortalClient, people: People, idp: LocalIdentityProvider
) -> None:
    use_settings(sso_allow_private=False)
    token = _as_admin(portal, people)
    form = {"_csrf_token": token, "issuer": idp.issuer, "client_id": idp.client_id,
            "client_secret": idp.client_secret, "allowed_domains": "tenant.example"}

    answer = portal.post("/settings/sign-in/provider", data=form)

    assert answer.status_code == 400 and "loopback" in answer.text
    with tenant_tx(people.tenant.slug) as tx:
        assert not sign_in_settings(tx).oidc_configured
