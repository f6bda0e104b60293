"""How a tenant's people may sign in: its single sign-on provider, password sign-in on or
off, two-factor for admins; and why a sign-in is refused, in words a person can act on.

Pure: db/people/sign_in_settings.py stores the settings, tocsin/providers/oidc.py talks to
the provider, portal/routes/single_sign_on.py and two_factor.py ask these for decisions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from domain.errors import InvalidInput
from domain.messages import N_

__all__ = [
    "ISSUER_MAX_LENGTH",
    "MAX_ALLOWED_DOMAINS",
    "RECOVERY_CODE_COUNT",
    "SignInRefusal",
    "SignInSettings",
    "email_domain_allowed",
    "normalise_recovery_code",
    "valid_domains",
    "valid_issuer",
    "valid_password_switch",
]

ISSUER_MAX_LENGTH = 500  # characters of an issuer URL
MAX_ALLOWED_DOMAINS = 50  # email domains a tenant may list
RECOVERY_CODE_COUNT = 10  # recovery codes made at enrolment, each used once
_DOMAIN = re.compile(r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}")


@dataclass(frozen=True)
class SignInSettings:
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    has_client_secret: bool = False  # the secret itself never leaves db/
    oidc_provider_name: str | None = None
    allowed_domains: tuple[str, ...] = ()
    provision_members: bool = False
    password_enabled: bool = True
    require_two_factor_for_admins: bool = False

    @property
    def oidc_configured(self) -> bool:
        return bool(self.oidc_issuer and self.oidc_client_id and self.has_client_secret)

    @property
    def provider_label(self) -> str:
        return self.oidc_provider_name or "single sign-on"


class SignInRefusal(StrEnum):
    """Every reason a single sign-on or second step is refused; the value is what the audit
    log records, ``message`` what the person reads."""

    WRONG_ISSUER = "wrong issuer"
    WRONG_AUDIENCE = "wrong audience"
    BAD_SIGNATURE = "bad signature"
    EXPIRED_TOKEN = "expired token"
    INVALID_TOKEN = "invalid token"
    UNKNOWN_STATE = "unknown, expired or replayed state"
    NONCE_MISMATCH = "nonce mismatch"
    EMAIL_NOT_VERIFIED = "email not verified"
    DOMAIN_NOT_ALLOWED = "email domain not allowed"
    NO_ACCOUNT = "no account and provisioning off"
    ACCOUNT_INACTIVE = "account not active"
    PROVIDER_ERROR = "provider error"
    NOT_CONFIGURED = "single sign-on not configured"
    PASSWORD_OFF = "password sign-in off"
    WRONG_CODE = "wrong two-factor code"
    REUSED_CODE = "two-factor code already used"
    REUSED_RECOVERY_CODE = "recovery code already used"

    @property
    def message(self) -> str:
        return _MESSAGES[self]


# Whole sentences (not put together from parts), so that each is one message of the catalogs.
_MESSAGES = {
    SignInRefusal.WRONG_ISSUER: N_(
        "The sign-in provider's answer could not be trusted (it came from another issuer). "
        'Nothing was signed in. Try again, or ask your administrator for help.'),
    SignInRefusal.WRONG_AUDIENCE: N_(
        "The sign-in provider's answer could not be trusted (it was meant for another "
        'application). Nothing was signed in. Try again, or ask your administrator for help.'),
    SignInRefusal.BAD_SIGNATURE: N_(
        "The sign-in provider's answer could not be trusted (its signature does not verify). "
        'Nothing was signed in. Try again, or ask your administrator for help.'),
    SignInRefusal.EXPIRED_TOKEN: N_(
        "The sign-in provider's answer could not be trusted (it has expired). Nothing was "
        'signed in. Try again, or ask your administrator for help.'),
    SignInRefusal.INVALID_TOKEN: N_(
        "The sign-in provider's answer could not be trusted (it is malformed). Nothing was "
        'signed in. Try again, or ask your administrator for help.'),
    SignInRefusal.UNKNOWN_STATE: N_(
        'This sign-in link has expired or was already used. Start again from the sign-in '
        'page.'),
    SignInRefusal.NONCE_MISMATCH: N_(
        "The sign-in provider's answer could not be trusted (it answers another sign-in). "
        'Nothing was signed in. Try again, or ask your administrator for help.'),
    SignInRefusal.EMAIL_NOT_VERIFIED: N_(
        'Your sign-in provider has not verified your email address. Verify it there, then try'
        ' again.'),
    SignInRefusal.DOMAIN_NOT_ALLOWED: N_(
        'Your email address is not one your organisation allows to sign in here. Ask your '
        'administrator.'),
    SignInRefusal.NO_ACCOUNT: N_(
        'You have no account here yet. Ask your administrator to invite you.'),
    SignInRefusal.ACCOUNT_INACTIVE: N_(
        'Your account here is not active. Ask your administrator.'),
    SignInRefusal.PROVIDER_ERROR: N_(
        'The sign-in provider could not be reached or refused the sign-in. Nothing was signed'
        ' in. Try again, or ask your administrator for help.'),
    SignInRefusal.NOT_CONFIGURED: N_(
        'Single sign-on is not set up for this organisation.'),
    SignInRefusal.PASSWORD_OFF: N_(
        'Your organisation signs in with single sign-on only: use the button below.'),
    SignInRefusal.WRONG_CODE: N_(
        'That code is wrong. Enter the current code from your authenticator app, or a '
        'recovery code.'),
    SignInRefusal.REUSED_CODE: N_(
        'That code was already used. Wait for the next code in your authenticator app.'),
    SignInRefusal.REUSED_RECOVERY_CODE: N_(
        'That recovery code was already used. Each recovery code works once.'),
}


def valid_issuer(issuer: str) -> str:
    issuer = issuer.strip().rstrip("/")
    if len(issuer) > ISSUER_MAX_LENGTH or not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", issuer):
        raise InvalidInput("the issuer must be the provider's URL, for example "
                           "https://login.example.com/realms/acme")
    return issuer


def valid_domains(text: str) -> tuple[str, ...]:
    """Allowed email domains typed one per line or separated by commas or spaces."""
    domains = sorted({d.strip().lower().lstrip("@") for d in re.split(r"[\s,]+", text) if d.strip()})
    if len(domains) > MAX_ALLOWED_DOMAINS:
        raise InvalidInput(f"list at most {MAX_ALLOWED_DOMAINS} email domains")
    for domain in domains:
        if not _DOMAIN.fullmatch(domain):
            raise InvalidInput(f"{domain!r} is not an email domain, such as example.com")
    return tuple(domains)


def email_domain_allowed(email: str, allowed: tuple[str, ...]) -> bool:
    """Only addresses at the listed domains (exactly: a subdomain is another organisation);
    no list at all allows none, so a provider shared with other companies lets none of
    theirs in by mistake."""
    _, at, domain = email.strip().lower().rpartition("@")
    return bool(at) and domain in allowed


def valid_password_switch(settings: SignInSettings, *, password_enabled: bool) -> None:
    """Password sign-in may be turned off only while single sign-on is set up: otherwise
    nobody could sign in at all."""
    if not password_enabled and not settings.oidc_configured:
        raise InvalidInput("set up single sign-on (issuer, client id and secret) before "
                           "turning password sign-in off: otherwise nobody could sign in")


def normalise_recovery_code(code: str) -> str:
    """A recovery code as typed (any case, spaces or dashes) in the form it was hashed."""
    return re.sub(r"[\s-]", "", code).lower()
