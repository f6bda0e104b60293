"""SESSION_SECRET as an attacker meets it: the published default must not open a door, the web
and worker processes refuse to start with it outside the embedded services, a rotated secret
keeps old links and sessions working while signing anew, and each purpose has its own key."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from litestar.testing import TestClient

from db.platform.tenancy import tenant_tx
from domain.delivery.unsubscribe import unsubscribe_token
from domain.tokens import sign
from portal.sessions import SESSION_COOKIE
from tests.integration.builders import scalar
from tests.integration.conftest import WAIT_LIMIT
from tests.integration.portal_support import People, PortalClient, csrf_token, sign_in, signed_in
from tocsin.boot.web import build_app
from tocsin.core.keys import MIN_SECRET_BYTES, Purpose, derive_key, signing_keys
from tocsin.core.settings import DEV_SESSION_SECRET, Settings, load_settings
from tocsin.shell.services import free_port

TOCSIN = str(Path(sys.executable).parent / "tocsin")
ROOT = Path(__file__).resolve().parents[2]
LICENCE = "license_expiring"


def _invite(portal: PortalClient, people: People, email: str) -> int:
    """A pending administrator invitation, made through the portal; its id."""
    html = signed_in(portal, people, people.admin)
    response = portal.post("/members/invite", follow_redirects=False, data={
        "_csrf_token": csrf_token(html), "email": email, "role": "admin", "client_id": "",
        "display_name": "Target"})
    assert response.status_code == 303
    portal.cookies.clear()
    invitation = scalar(people.tenant, "SELECT max(id) FROM invitations")
    assert isinstance(invitation, int)
    return invitation


def test_an_invitation_link_minted_with_the_published_default_secret_is_refused(
    portal: PortalClient, people: People
) -> None:
    invitation = _invite(portal, people, "new.admin@example.com")
    claims: dict[str, str | int] = {"tenant": people.tenant.slug, "invitation": invitation}
    expires = datetime.now(UTC) + timedelta(days=7)
    # What a reader of the source can compute: the old scheme (the raw default secret) and the
    # new one (the default secret's derived invitation key).
    forged = [sign(DEV_SESSION_SECRET.encode(), "invite", claims, expires),
              sign(derive_key(DEV_SESSION_SECRET, Purpose.INVITATION), "invite", claims, expires)]

    for token in forged:
        page = portal.get(f"/invitations/{token}")
        join = portal.post(f"/invitations/{token}/join", data={
            "_csrf_token": csrf_token(portal.get("/login").text),
            "password": "attacker passphrase", "confirm": "attacker passphrase"},
            follow_redirects=False)
        assert page.status_code == 400 and "This link is not valid" in page.text
        assert join.status_code == 400 and SESSION_COOKIE not in portal.cookies

    assert scalar(people.tenant, "SELECT accepted_at FROM invitations WHERE id = %s", invitation) is None
    assert scalar(people.tenant, "SELECT password_hash FROM users WHERE email = %s",
                  "new.admin@example.com") is None
    assert sign_in(portal, people.tenant.slug, "new.admin@example.com",
                   "attacker passphrase").status_code == 400


def _process_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SESSION_SECRET", "SESSION_SECRET_PREVIOUS", "TOCSIN_EMBEDDED")}
    return {**env, "PORT": str(free_port()), **overrides}


@pytest.mark.parametrize("command", [["web"], ["worker", "--processes", "1", "--threads", "1"]])
@pytest.mark.parametrize("secret", [None, DEV_SESSION_SECRET, "x" * (MIN_SECRET_BYTES - 1)])
def test_web_and_worker_refuse_to_start_with_the_default_or_a_short_secret_outside_embedded_mode(
    command: list[str], secret: str | None
) -> None:
    env = _process_env(**({} if secret is None else {"SESSION_SECRET": secret}))
    started = subprocess.run([TOCSIN, *command], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=WAIT_LIMIT)
    assert started.returncode == 2
    lines = started.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tocsin: error: SESSION_SECRET "), started.stderr
    assert str(MIN_SECRET_BYTES) in lines[0]


def test_the_embedded_services_may_run_on_the_default_secret() -> None:
    settings = dataclasses.replace(load_settings(), session_secret=DEV_SESSION_SECRET, embedded=True)
    with TestClient(app=build_app(settings)) as client:
        assert client.get("/login").status_code == 200
    with pytest.raises(Exception, match="published development default"):
        build_app(dataclasses.replace(settings, embedded=False))


def _app(settings: Settings, secret: str, previous: tuple[str, ...] = ()) -> TestClient:  # type: ignore[type-arg]
    return TestClient(app=build_app(dataclasses.replace(
        settings, session_secret=secret, previous_session_secrets=previous)))


def test_a_rotated_secret_still_accepts_old_sessions_and_links_but_signs_with_the_new_one(
    people: People
) -> None:
    settings = load_settings()
    old, new = "o" * 40, "n" * 40
    with _app(settings, old) as before:
        sign_in(before, people.tenant.slug, people.client_user.email)
        old_cookie = before.cookies[SESSION_COOKIE]
    old_link = unsubscribe_token(derive_key(old, Purpose.UNSUBSCRIBE), people.tenant.slug,
                                 people.client_user.id, LICENCE, datetime.now(UTC))

    with _app(settings, new, (old,)) as rotated:
        rotated.cookies.set(SESSION_COOKIE, old_cookie, domain="testserver.local")
        assert rotated.get("/", follow_redirects=False).status_code == 200  # still signed in
        resigned = rotated.cookies[SESSION_COOKIE]
        assert resigned != old_cookie and resigned.split(".")[0] == old_cookie.split(".")[0]
        assert rotated.get(f"/unsubscribe/{old_link}").status_code == 200
    new_keys = signing_keys(dataclasses.replace(settings, session_secret=new))
    assert rotated.app.state.signing_keys.unsubscribe.current == new_keys.unsubscribe.current

    with _app(settings, new) as forgotten:  # once the old secret is dropped, so are its sessions
        forgotten.cookies.set(SESSION_COOKIE, old_cookie, domain="testserver.local")
        assert forgotten.get("/", follow_redirects=False).status_code == 303
        assert forgotten.get(f"/unsubscribe/{old_link}").status_code == 400
        forgotten.cookies.set(SESSION_COOKIE, resigned, domain="testserver.local")
        assert forgotten.get("/", follow_redirects=False).status_code == 200


def _email_on(people: People) -> bool:
    with tenant_tx(people.tenant.slug) as tx:
        row = tx.conn.execute(
            "SELECT email FROM notification_preferences WHERE user_id = %s AND category = %s",
            [people.client_user.id, LICENCE]).fetchone()
    return row is None or bool(row[0])


def test_a_value_signed_for_sessions_does_not_pass_as_an_unsubscribe_token(
    portal: PortalClient, people: People
) -> None:
    keys = signing_keys(load_settings())
    sign_in(portal, people.tenant.slug, people.client_user.email)
    session_cookie = portal.cookies[SESSION_COOKIE]
    portal.cookies.clear()
    claims: dict[str, str | int] = {"tenant": people.tenant.slug, "user": people.client_user.id,
                                    "category": LICENCE}
    expires = datetime.now(UTC) + timedelta(days=1)
    for purpose_key in (keys.session.current, keys.csrf.current, keys.invitation.current):
        forged = sign(purpose_key, "unsubscribe", claims, expires)
        assert portal.post(f"/unsubscribe/{forged}").status_code == 400
    assert portal.post(f"/unsubscribe/{session_cookie}").status_code == 400
    assert _email_on(people)

    genuine = sign(keys.unsubscribe.current, "unsubscribe", claims, expires)
    assert portal.post(f"/unsubscribe/{genuine}").status_code == 200
    assert not _email_on(people)


def test_after_a_rotation_a_stale_csrf_cookie_is_replaced_once_a_form_is_refused(people: People) -> None:
    settings = load_settings()
    old, new = "o" * 40, "n" * 40
    with _app(settings, old) as before:
        before.get("/login")
        stale = before.cookies["tocsin_csrf"]
    with _app(settings, new, (old,)) as after:
        after.cookies.set("tocsin_csrf", stale, domain="testserver.local")
        refused = sign_in(after, people.tenant.slug, people.client_user.email)  # the stale token
        assert refused.status_code == 403 and "tocsin_csrf" not in after.cookies
        assert sign_in(after, people.tenant.slug, people.client_user.email).status_code == 303
