"""What every way of signing in shares once the first step (a password, or the single
sign-on provider's word) has named the person: the second step when they use two-factor,
the set-up page when their organisation requires it of admins and they have none, the
audit row, and the fresh session. And the refusals, each audited the same way.
"""

from __future__ import annotations

import contextlib
from typing import Any

from litestar import Request
from litestar.datastructures import Cookie
from litestar.response import Redirect
from litestar.status_codes import HTTP_303_SEE_OTHER

from db.evidence.audit import record_audit, record_audit_alone
from db.people.sign_in_settings import sign_in_settings
from db.people.two_factor import two_factor_enabled
from db.people.users import User
from db.platform.tenancy import tenant_tx
from domain.audit import Actor, ActorKind
from domain.errors import InvalidInput, NotFound
from domain.people.identity import Role
from domain.people.sign_in import SignInSettings
from portal.auth import request_address
from portal.sessions import start_pending_session, start_session

__all__ = [
    "CSRF_COOKIE",
    "SECOND_STEP_PATH",
    "TWO_FACTOR_SETUP_PATH",
    "finish_first_step",
    "record_refusal",
    "sign_in_options",
    "signed_in_redirect",
]

CSRF_COOKIE = "tocsin_csrf"  # the name portal.app gives Litestar's CSRF cookie
SECOND_STEP_PATH = "/login/two-factor"
TWO_FACTOR_SETUP_PATH = "/account/two-factor"


def sign_in_options(organisation: str) -> SignInSettings | None:
    """How this organisation signs in, or None when there is no such organisation."""
    try:
        with tenant_tx(organisation.strip().lower()) as tx:
            return sign_in_settings(tx) if tx.tenant.status == "active" else None
    except (InvalidInput, NotFound):
        return None


def record_refusal(organisation: str, email: str | None, address: str, reason: str,
                   action: str = "sign_in.refused") -> None:
    """A refused sign-in, in the audit log of the organisation (when it exists: an unknown
    organisation has no log to write to)."""
    typed = (email or "").strip()[:320]
    with contextlib.suppress(InvalidInput, NotFound):
        record_audit_alone(
            organisation.strip().lower(), action, "user", None,
            actor=Actor(ActorKind.ANONYMOUS, typed or "anonymous", None, address),
            after={"email": typed or None, "reason": reason},
        )


def signed_in_redirect(request: Request[Any, Any, Any], path: str) -> Redirect:
    """After a sign-in: the CSRF cookie is dropped, so the next page mints a fresh token (a
    token planted or read before sign-in is worth nothing after it)."""
    secure = bool(request.app.state.portal_settings.secure_cookies)
    return Redirect(path, status_code=HTTP_303_SEE_OTHER,
                    cookies=[Cookie(key=CSRF_COOKIE, value="", max_age=0, expires=0, httponly=True,
                                    secure=secure, samesite="lax")])


def finish_first_step(request: Request[Any, Any, Any], tenant: str, user: User, method: str,
                      next_path: str) -> Redirect:
    """The person is who they said (``method``: password, oidc). With two-factor on, the
    session waits for the code; otherwise they are signed in, and an admin who must set up
    two-factor is sent to do that first."""
    address = request_address(request)
    with tenant_tx(tenant) as tx:
        has_two_factor = two_factor_enabled(tx, user.id)
        must_enrol = (not has_two_factor and user.role is Role.ADMIN
                      and sign_in_settings(tx).require_two_factor_for_admins)
        if not has_two_factor:
            record_audit(tx, "sign_in", "user", user.id,
                         actor=Actor.user(user.id, user.email, address),
                         after={"method": method, **({"must_enrol": True} if must_enrol else {})})
    if has_two_factor:
        start_pending_session(request, tenant, user.id, method=method, next=next_path, failures=0,
                              email=user.email)
        return signed_in_redirect(request, SECOND_STEP_PATH)
    start_session(request, tenant, user.id, must_enrol=must_enrol)
    return signed_in_redirect(request, TWO_FACTOR_SETUP_PATH if must_enrol else next_path)
