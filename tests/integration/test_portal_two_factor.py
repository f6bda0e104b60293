"""Two-factor sign-in through the portal over HTTP: enrolment confirmed with a code, sign-in
with a code, a wrong code and a replayed one refused and audited, a recovery code used once,
two-factor required of admins, turning it off. The clock is pinned to chosen 30-second steps,
so no test depends on when it runs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pyotp
import pytest

from db.people.sign_in_settings import set_two_factor_required
from db.people.users import User
from db.platform.tenancy import tenant_tx
from domain.people.sign_in import RECOVERY_CODE_COUNT, SignInRefusal
from portal.routes.two_factor import MAX_SECOND_STEP_FAILURES
from tests.integration.portal_support import People, PortalClient, csrf_token, sign_in
from tests.integration.sign_in_support import last_audit, signed_in_as, sso_sign_in, use_provider
from tests.support.oidc_provider import Account, LocalIdentityProvider
from tocsin.core.clock import pinned

STEP = timedelta(seconds=30)


@pytest.fixture
def step0() -> datetime:
    """The start of the current 30-second step: the tests move the clock from there."""
    now = int(datetime.now(UTC).timestamp())
    return datetime.fromtimestamp(now - now % 30, UTC)


@contextmanager
def at(instant: datetime) -> Iterator[None]:
    with pinned(instant):
        yield


def code(secret: str, instant: datetime) -> str:
    return pyotp.TOTP(secret).at(instant)


def wrong_code(secret: str, instant: datetime) -> str:
    near = {code(secret, instant + k * STEP) for k in (-1, 0, 1)}
    return next(c for c in ("000000", "111111", "222222", "333333") if c not in near)


def enrol(portal: PortalClient, people: People, user: User, when: datetime) -> tuple[str, list[str]]:
    """Sign in and turn two-factor on: the secret and the recovery codes shown."""
    with at(when):
        assert sign_in(portal, people.tenant.slug, user.email).status_code == 303
        token = csrf_token(portal.get("/account/two-factor").text)
        assert portal.post("/account/two-factor/start", data={"_csrf_token": token},
                           follow_redirects=False).status_code == 303
        page = portal.get("/account/two-factor").text
        found = re.search(r'id="totp-secret">([A-Z2-7]+)<', page)
        assert found and "otpauth://totp/" in page
        secret = found.group(1)
        confirmed = portal.post("/account/two-factor/confirm",
                                data={"_csrf_token": token, "code": code(secret, when)})
    assert confirmed.status_code == 200, confirmed.text
    codes = re.findall(r"<li><code>([a-z2-7-]+)</code></li>", confirmed.text)
    portal.cookies.clear()
    return secret, codes


def second_step(portal: PortalClient, typed: str) -> tuple[int, str]:
    page = portal.get("/login/two-factor")
    assert page.status_code == 200
    answer = portal.post("/login/two-factor", data={"_csrf_token": csrf_token(page.text), "code": typed},
                         follow_redirects=False)
    return answer.status_code, answer.text.replace("&#39;", "'")


def test_enrolment_is_confirmed_with_a_code_and_shows_ten_recovery_codes_once(
    portal: PortalClient, people: People, step0: datetime
) -> None:
    secret, codes = enrol(portal, people, people.admin, step0)

    assert len(codes) == len(set(codes)) == RECOVERY_CODE_COUNT
    with tenant_tx(people.tenant.slug) as tx:
        stored = [r[0] for r in tx.conn.execute("SELECT code_hash FROM recovery_codes").fetchall()]
    assert len(stored) == RECOVERY_CODE_COUNT and not set(codes) & set(stored)  # hashed
    assert last_audit(people.tenant, "two_factor.enable")[1] == {"recovery_codes": RECOVERY_CODE_COUNT}
    with at(step0 + STEP):
        assert sign_in(portal, people.tenant.slug, people.admin.email).status_code == 303
        assert second_step(portal, code(secret, step0 + STEP))[0] == 303
        page = portal.get("/account/two-factor").text
    assert "Two-factor sign-in is on" in page and codes[0] not in page


def test_a_user_with_two_factor_is_signed_in_only_after_a_current_code(
    portal: PortalClient, people: People, step0: datetime
) -> None:
    secret, _ = enrol(portal, people, people.admin, step0)
    with at(step0 + 2 * STEP):
        first = sign_in(portal, people.tenant.slug, people.admin.email)
        assert first.headers["location"] == "/login/two-factor"
        assert signed_in_as(portal) is None  # the password alone signs nobody in

        status, _ = second_step(portal, code(secret, step0 + 2 * STEP))

        assert status == 303
        assert signed_in_as(portal) == people.admin.email
    assert last_audit(people.tenant, "sign_in") == ("sign_in", {"method": "password+totp"})


def test_a_wrong_code_is_refused_and_audited(
    portal: PortalClient, people: People, step0: datetime
) -> None:
    secret, _ = enrol(portal, people, people.admin, step0)
    with at(step0 + STEP):
        sign_in(portal, people.tenant.slug, people.admin.email)

        status, text = second_step(portal, wrong_code(secret, step0 + STEP))

        assert status == 400 and SignInRefusal.WRONG_CODE.message in text
        assert signed_in_as(portal) is None
    assert last_audit(people.tenant, "sign_in")[1]["reason"] == SignInRefusal.WRONG_CODE.value


def test_a_code_already_used_is_refused_when_replayed(
    portal: PortalClient, people: People, step0: datetime
) -> None:
    secret, _ = enrol(portal, people, people.admin, step0)
    used = code(secret, step0 + STEP)
    with at(step0 + STEP):
        sign_in(portal, people.tenant.slug, people.admin.email)
        assert second_step(portal, used)[0] == 303
        portal.cookies.clear()
        sign_in(portal, people.tenant.slug, people.admin.email)

        status, text = second_step(portal, used)

        assert status == 400 and SignInRefusal.REUSED_CODE.message in text
        assert signed_in_as(portal) is None
    assert last_audit(people.tenant, "sign_in")[1]["reason"] == SignInRefusal.REUSED_CODE.value


def test_a_recovery_code_signs_in_once_and_is_refused_the_second_time(
    portal: PortalClient, people: People, step0: datetime
) -> None:
    _, codes = enrol(portal, people, people.admin, step0)
    sign_in(portal, people.tenant.slug, people.admin.email)

    assert second_step(portal, codes[3].upper().replace("-", " "))[0] == 303
    assert last_audit(people.tenant, "sign_in") == ("sign_in", {"method": "password+recovery_code"})
    portal.cookies.clear()
    sign_in(portal, people.tenant.slug, people.admin.email)

    status, text = second_step(portal, codes[3])

    assert status == 400 and SignInRefusal.REUSED_RECOVERY_CODE.message in text
    assert signed_in_as(portal) is None
    assert last_audit(people.tenant, "sign_in")[1]["reason"] == SignInRefusal.REUSED_RECOVERY_CODE.value


def test_too_many_wrong_codes_end_the_half_done_sign_in(
    portal: PortalClient, people: People, step0: datetime
) -> None:
    secret, _ = enrol(portal, people, people.admin, step0)
    with at(step0 + STEP):
        sign_in(portal, people.tenant.slug, people.admin.email)
        for _ in range(MAX_SECOND_STEP_FAILURES - 1):
            assert second_step(portal, wrong_code(secret, step0 + STEP))[0] == 400
        token = csrf_token(portal.get("/login/two-factor").text)
        last = portal.post("/login/two-factor", data={"_csrf_token": token,
                                                      "code": wrong_code(secret, step0 + STEP)})
        assert "Sign in again from the start" in last.text

        # Even the right code is no use now: the half-done sign-in is gone.
        assert portal.get("/login/two-factor", follow_redirects=False).headers["location"] == "/login"


def test_an_admin_without_two_factor_must_set_it_up_when_the_organisation_requires_it(
    portal: PortalClient, people: People, step0: datetime
) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        set_two_factor_required(tx, True)
    with at(step0):
        answer = sign_in(portal, people.tenant.slug, people.admin.email)
        assert answer.headers["location"] == "/account/two-factor"
        inbox = portal.get("/", follow_redirects=False)
        assert (inbox.status_code, inbox.headers["location"]) == (303, "/account/two-factor")
        token = csrf_token(portal.get("/account/two-factor").text)
        portal.post("/account/two-factor/start", data={"_csrf_token": token})
        page = portal.get("/account/two-factor").text
        assert 'id="must-enrol"' in page
        found = re.search(r'id="totp-secret">([A-Z2-7]+)<', page)
        assert found
        portal.post("/account/two-factor/confirm", data={"_csrf_token": token,
                                                         "code": code(found.group(1), step0)})

        assert portal.get("/", follow_redirects=False).status_code == 200


def test_a_member_is_not_held_by_the_admins_requirement(portal: PortalClient, people: People) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        set_two_factor_required(tx, True)

    assert sign_in(portal, people.tenant.slug, people.client_user.email).headers["location"] == "/"


def test_single_sign_on_also_asks_for_the_second_step(
    portal: PortalClient, people: People, idp: LocalIdentityProvider, step0: datetime
) -> None:
    secret, _ = enrol(portal, people, people.admin, step0)
    use_provider(people.tenant, idp)
    idp.account = Account(people.admin.email)
    with at(step0 + STEP):
        answer = sso_sign_in(portal, people.tenant.slug)
        assert answer.headers["location"] == "/login/two-factor"
        assert signed_in_as(portal) is None

        assert second_step(portal, code(secret, step0 + STEP))[0] == 303
    assert last_audit(people.tenant, "sign_in") == ("sign_in", {"method": "oidc+totp"})


def test_two_factor_is_turned_off_with_a_current_code(
    portal: PortalClient, people: People, step0: datetime
) -> None:
    secret, _ = enrol(portal, people, people.admin, step0)
    with at(step0 + STEP):
        sign_in(portal, people.tenant.slug, people.admin.email)
        second_step(portal, code(secret, step0 + STEP))
        token = csrf_token(portal.get("/account/two-factor").text)
        assert portal.post("/account/two-factor/disable", data={"_csrf_token": token, "code": "000000"}
                           ).status_code == 400
    with at(step0 + 2 * STEP):
        off = portal.post("/account/two-factor/disable",
                          data={"_csrf_token": token, "code": code(secret, step0 + 2 * STEP)},
                          follow_redirects=False)
        assert off.status_code == 303
        portal.cookies.clear()
        assert sign_in(portal, people.tenant.slug, people.admin.email).headers["location"] == "/"
    assert last_audit(people.tenant, "two_factor.disable")[0] == "two_factor.disable"


def test_wrong_codes_count_with_the_accounts_password_attempts(
    portal: PortalClient, people: People, step0: datetime
) -> None:
    secret, _ = enrol(portal, people, people.admin, step0)
    with at(step0 + STEP):
        sign_in(portal, people.tenant.slug, people.admin.email)
        for _ in range(MAX_SECOND_STEP_FAILURES):
            token = csrf_token(portal.get("/login/two-factor").text)
            portal.post("/login/two-factor", data={"_csrf_token": token,
                                                   "code": wrong_code(secret, step0 + STEP)})

        # The right password does not start another five guesses: the account is paused.
        assert sign_in(portal, people.tenant.slug, people.admin.email).status_code == 429
