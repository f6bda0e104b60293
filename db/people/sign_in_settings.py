"""A tenant's sign-in settings (single sign-on provider, password sign-in, two-factor for
admins), the single sign-ons in flight (state, nonce, PKCE verifier), and finding or
provisioning the person a provider vouched for."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import psycopg

from db.evidence.audit import record_audit
from db.people.users import User, get_user
from db.platform.tenancy import TenantTx
from domain.errors import InvalidInput
from domain.people.identity import Role, valid_email, valid_name
from domain.people.sign_in import (
    SignInRefusal,
    SignInSettings,
    email_domain_allowed,
    valid_issuer,
    valid_password_switch,
)

__all__ = [
    "CLIENT_FIELD_MAX_LENGTH",
    "SIGN_IN_LIFETIME_SECONDS",
    "PendingSignIn",
    "ProviderCredentials",
    "SingleSignOnRefused",
    "begin_single_sign_on",
    "provider_credentials",
    "save_provider",
    "set_password_sign_in",
    "set_two_factor_required",
    "sign_in_settings",
    "take_single_sign_on",
    "user_for_verified_email",
]

SIGN_IN_LIFETIME_SECONDS = 600  # seconds a person has at the provider before the state expires
CLIENT_FIELD_MAX_LENGTH = 500  # characters of a client id, secret or provider name


class SingleSignOnRefused(Exception):
    """A single sign-on refused for one of the reasons the person is told and the audit
    log records."""

    def __init__(self, reason: SignInRefusal, email: str | None = None):
        super().__init__(reason.value)
        self.reason = reason
        self.email = email


@dataclass(frozen=True)
class ProviderCredentials:
    issuer: str
    client_id: str
    client_secret: str


@dataclass(frozen=True)
class PendingSignIn:
    state: str
    nonce: str
    code_verifier: str
    next_path: str


_COLUMNS = """oidc_issuer, oidc_client_id, oidc_client_secret IS NOT NULL, oidc_provider_name,
    oidc_allowed_domains, oidc_provision_members, password_enabled, require_two_factor_for_admins"""


def sign_in_settings(tx: TenantTx) -> SignInSettings:
    row = tx.conn.execute(f"SELECT {_COLUMNS} FROM sign_in_settings").fetchone()
    if row is None:
        return SignInSettings()
    domains = row[4] if isinstance(row[4], list) else []
    return SignInSettings(
        oidc_issuer=None if row[0] is None else str(row[0]),
        oidc_client_id=None if row[1] is None else str(row[1]),
        has_client_secret=bool(row[2]),
        oidc_provider_name=None if row[3] is None else str(row[3]),
        allowed_domains=tuple(str(d) for d in domains),
        provision_members=bool(row[5]), password_enabled=bool(row[6]),
        require_two_factor_for_admins=bool(row[7]),
    )


def provider_credentials(tx: TenantTx) -> ProviderCredentials | None:
    """What the portal needs to talk to the provider: None until it is set up."""
    row = tx.conn.execute(
        "SELECT oidc_issuer, oidc_client_id, oidc_client_secret FROM sign_in_settings"
    ).fetchone()
    if row is None or None in row:
        return None
    return ProviderCredentials(str(row[0]), str(row[1]), str(row[2]))


def _field(value: str, name: str) -> str:
    value = value.strip()
    if not value:
        raise InvalidInput(f"enter the {name}")
    if len(value) > CLIENT_FIELD_MAX_LENGTH:
        raise InvalidInput(f"the {name} must be at most {CLIENT_FIELD_MAX_LENGTH} characters")
    return value


def _audited(settings: SignInSettings) -> dict[str, object]:
    return {"issuer": settings.oidc_issuer, "client_id": settings.oidc_client_id,
            "provider_name": settings.oidc_provider_name,
            "allowed_domains": list(settings.allowed_domains),
            "provision_members": settings.provision_members}


def save_provider(tx: TenantTx, *, issuer: str, client_id: str, client_secret: str,
                  provider_name: str, allowed_domains: tuple[str, ...],
                  provision_members: bool) -> SignInSettings:
    """Set the single sign-on provider. An empty secret keeps the one stored (it is never
    shown back, so the form cannot hold it); the secret itself is never audited."""
    before = sign_in_settings(tx)
    issuer = valid_issuer(issuer)
    client_id = _field(client_id, "client id")
    secret = client_secret.strip() or None
    if secret is None and not before.has_client_secret:
        raise InvalidInput("enter the client secret")
    if secret is not None:
        secret = _field(secret, "client secret")
    name = valid_name(provider_name, "provider name") if provider_name.strip() else None
    tx.conn.execute(
        "UPDATE sign_in_settings SET oidc_issuer = %s, oidc_client_id = %s, "
        "oidc_client_secret = coalesce(%s, oidc_client_secret), oidc_provider_name = %s, "
        "oidc_allowed_domains = %s, oidc_provision_members = %s",
        [issuer, client_id, secret, name, list(allowed_domains), provision_members],
    )
    after = sign_in_settings(tx)
    record_audit(tx, "settings.single_sign_on", "tenant", tx.tenant.slug,
                 before=_audited(before),
                 after={**_audited(after), "client_secret": "changed" if secret else "kept"})
    return after


def set_password_sign_in(tx: TenantTx, enabled: bool) -> None:
    """Turn password sign-in on or off; off only while single sign-on is set up."""
    before = sign_in_settings(tx)
    valid_password_switch(before, password_enabled=enabled)
    if before.password_enabled == enabled:
        return
    tx.conn.execute("UPDATE sign_in_settings SET password_enabled = %s", [enabled])
    record_audit(tx, "settings.password_sign_in", "tenant", tx.tenant.slug,
                 before={"password_enabled": before.password_enabled},
                 after={"password_enabled": enabled})


def set_two_factor_required(tx: TenantTx, required: bool) -> None:
    before = sign_in_settings(tx)
    if before.require_two_factor_for_admins == required:
        return
    tx.conn.execute("UPDATE sign_in_settings SET require_two_factor_for_admins = %s", [required])
    record_audit(tx, "settings.two_factor_for_admins", "tenant", tx.tenant.slug,
                 before={"require_two_factor_for_admins": before.require_two_factor_for_admins},
                 after={"require_two_factor_for_admins": required})


def begin_single_sign_on(tx: TenantTx, next_path: str) -> PendingSignIn:
    """A new sign-in at the provider: its state, nonce and PKCE verifier, kept until the
    provider sends the browser back (or SIGN_IN_LIFETIME_SECONDS pass). Expired ones go."""
    tx.conn.execute("DELETE FROM oidc_sign_ins WHERE expires_at < now()")
    pending = PendingSignIn(secrets.token_urlsafe(32), secrets.token_urlsafe(32),
                            secrets.token_urlsafe(48), next_path)
    tx.conn.execute(
        "INSERT INTO oidc_sign_ins (state, nonce, code_verifier, next_path, expires_at) "
        "VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s))",
        [pending.state, pending.nonce, pending.code_verifier, next_path, SIGN_IN_LIFETIME_SECONDS],
    )
    return pending


def take_single_sign_on(tx: TenantTx, state: str) -> PendingSignIn:
    """The sign-in this state started, taken: a second use of the same state (a replay),
    an unknown one or an expired one is refused."""
    row = tx.conn.execute(
        "DELETE FROM oidc_sign_ins WHERE state = %s RETURNING nonce, code_verifier, next_path, "
        "expires_at >= now()", [state[:200]],
    ).fetchone()
    if row is None or not row[3]:
        raise SingleSignOnRefused(SignInRefusal.UNKNOWN_STATE)
    return PendingSignIn(state, str(row[0]), str(row[1]), str(row[2]))


def user_for_verified_email(tx: TenantTx, settings: SignInSettings, email: str) -> User:
    """The person the provider vouched for: the account with this email, or a new member
    when the tenant provisions on first sign-in. Refused outside the allowed domains."""
    try:
        email = valid_email(email)
    except InvalidInput:
        raise SingleSignOnRefused(SignInRefusal.INVALID_TOKEN) from None
    if not email_domain_allowed(email, settings.allowed_domains):
        raise SingleSignOnRefused(SignInRefusal.DOMAIN_NOT_ALLOWED, email)
    row = tx.conn.execute("SELECT id FROM users WHERE lower(email) = %s", [email]).fetchone()
    if row is not None:
        user = get_user(tx, int(str(row[0])))
        assert user is not None
        if not user.active or not user.can_sign_in:
            raise SingleSignOnRefused(SignInRefusal.ACCOUNT_INACTIVE, email)
        return user
    if not settings.provision_members:
        raise SingleSignOnRefused(SignInRefusal.NO_ACCOUNT, email)
    try:
        with tx.conn.transaction():
            created = tx.conn.execute(
                "INSERT INTO users (email, display_name, role) VALUES (%s, %s, %s) RETURNING id",
                [email, email.split("@")[0], Role.MEMBER.value],
            ).fetchone()
    except psycopg.errors.UniqueViolation:  # provisioned by a sign-in at the same moment
        return user_for_verified_email(tx, settings, email)
    assert created is not None
    user = get_user(tx, int(str(created[0])))
    assert user is not None
    record_audit(tx, "user.provision", "user", user.id,
                 after={"email": user.email, "role": user.role, "method": "oidc"})
    return user
