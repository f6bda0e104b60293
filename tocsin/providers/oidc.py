"""The OpenID Connect adapter: the provider's discovery document, the authorisation URL of a
code flow with PKCE (S256, Authlib's RFC 7636 helper), state and nonce, the code exchanged at
the token endpoint (client_secret_basic, over httpx), and the ID token verified against the
provider's published keys with joserfc (Authlib's JOSE library: `authlib.jose` and Authlib's
httpx client now warn that they are deprecated in its favour).

Every check that fails names its reason (domain.people.sign_in.SignInRefusal): the issuer,
the audience, the signature, the expiry, the nonce. Nothing here decides who the person is
in Tocsin; db/people/sign_in_settings.py does, from the verified claims only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
from authlib.common.urls import add_params_to_uri
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc import jwt
from joserfc.errors import (
    BadSignatureError,
    ClaimError,
    ExpiredTokenError,
    JoseError,
)
from joserfc.jwk import KeySet

from domain.delivery.webhooks import DestinationRefused, check_destination
from domain.people.sign_in import SignInRefusal
from tocsin.providers.webhook_http import resolve

__all__ = [
    "TIMEOUT_SECONDS",
    "IdTokenRefused",
    "ProviderMetadata",
    "ProviderUnavailable",
    "VerifiedIdentity",
    "authorization_url",
    "discover",
    "exchange_code",
    "verified_identity",
]

TIMEOUT_SECONDS = 10.0  # seconds for each call to the provider
LEEWAY_SECONDS = 60  # seconds of clock difference tolerated on exp/iat
_ALGORITHMS = ["RS256", "ES256", "PS256"]  # never "none", never a shared-secret HS*
SCOPE = "openid email profile"


class ProviderUnavailable(Exception):
    """The provider did not answer as OpenID Connect says it must (down, a wrong URL, an
    error from the token endpoint)."""


class IdTokenRefused(Exception):
    def __init__(self, reason: SignInRefusal):
        super().__init__(reason.value)
        self.reason = reason


@dataclass(frozen=True)
class ProviderMetadata:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str


@dataclass(frozen=True)
class VerifiedIdentity:
    subject: str
    email: str | None
    email_verified: bool


def _guard(url: str, allow_private: bool) -> None:
    """The webhooks' SSRF guard on every address the provider's host resolves to: a tenant's
    administrator types the issuer, and must not make the portal call its own network or a
    cloud metadata address. (A check before the call, not a pinned connection as webhooks
    have: a name that resolves otherwise a moment later is not caught.)"""
    if allow_private:
        return
    parts = urlsplit(url)
    try:
        host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
        check_destination(host, resolve(host, port), allow_private=False)
    except (DestinationRefused, ValueError) as e:
        raise ProviderUnavailable(f"{url} is refused: {e}") from None


def _get_json(url: str, allow_private: bool) -> dict[str, Any]:
    _guard(url, allow_private)
    try:
        response = httpx.get(url, timeout=TIMEOUT_SECONDS, follow_redirects=False)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as e:  # UnicodeError is a ValueError
        raise ProviderUnavailable(f"{url} did not answer with JSON: {e}") from None
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"{url} did not answer with a JSON object")
    return document


def discover(issuer: str, *, allow_private: bool) -> ProviderMetadata:
    """The provider's endpoints from {issuer}/.well-known/openid-configuration, whose own
    issuer must be the one configured (OpenID Connect Discovery, section 4.3)."""
    document = _get_json(issuer.rstrip("/") + "/.well-known/openid-configuration", allow_private)
    if str(document.get("issuer", "")).rstrip("/") != issuer.rstrip("/"):
        raise ProviderUnavailable(f"the discovery document names another issuer: "
                                  f"{str(document.get('issuer'))[:200]!r}")
    try:
        return ProviderMetadata(str(document["issuer"]), str(document["authorization_endpoint"]),
                                str(document["token_endpoint"]), str(document["jwks_uri"]))
    except KeyError as e:
        raise ProviderUnavailable(f"the discovery document has no {e.args[0]}") from None


def authorization_url(meta: ProviderMetadata, client_id: str, redirect_uri: str, *, state: str,
                      nonce: str, code_verifier: str) -> str:
    return str(add_params_to_uri(meta.authorization_endpoint, [
        ("response_type", "code"), ("client_id", client_id), ("redirect_uri", redirect_uri),
        ("scope", SCOPE), ("state", state), ("nonce", nonce),
        ("code_challenge", create_s256_code_challenge(code_verifier)),
        ("code_challenge_method", "S256"),
    ]))


def exchange_code(meta: ProviderMetadata, client_id: str, client_secret: str, redirect_uri: str,
                  *, code: str, code_verifier: str, allow_private: bool) -> str:
    """The ID token the token endpoint gives for this code (client_secret_basic)."""
    _guard(meta.token_endpoint, allow_private)
    try:
        response = httpx.post(
            meta.token_endpoint, timeout=TIMEOUT_SECONDS, follow_redirects=False,
            auth=httpx.BasicAuth(quote(client_id, safe=""), quote(client_secret, safe="")),
            data={"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                  "code_verifier": code_verifier},
            headers={"accept": "application/json"},
        )
        answer = response.json()
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as e:
        raise ProviderUnavailable(f"the token endpoint did not answer: {e}") from None
    if response.status_code != 200 or not isinstance(answer, dict):
        error = answer.get("error") if isinstance(answer, dict) else None
        raise ProviderUnavailable(f"the token endpoint refused the code ({response.status_code}, "
                                  f"{str(error)[:100]})")
    id_token = answer.get("id_token")
    if not isinstance(id_token, str):
        raise ProviderUnavailable("the token endpoint's answer has no id_token")
    return id_token


_CLAIM_REASONS = {"iss": SignInRefusal.WRONG_ISSUER, "aud": SignInRefusal.WRONG_AUDIENCE,
                  "azp": SignInRefusal.WRONG_AUDIENCE, "nonce": SignInRefusal.NONCE_MISMATCH,
                  "exp": SignInRefusal.EXPIRED_TOKEN}


def verified_identity(meta: ProviderMetadata, id_token: str, *, client_id: str,
                      nonce: str, allow_private: bool) -> VerifiedIdentity:
    """The ID token's identity once its signature (the provider's JWKS), issuer, audience,
    expiry and nonce all hold; IdTokenRefused naming the first that does not."""
    try:
        keys = KeySet.import_key_set(_get_json(meta.jwks_uri, allow_private))  # type: ignore[arg-type]
    except (JoseError, ValueError, TypeError):
        raise ProviderUnavailable("the provider's JWKS holds no usable key") from None
    registry = jwt.JWTClaimsRegistry(
        leeway=LEEWAY_SECONDS,
        iss={"essential": True, "value": meta.issuer},
        aud={"essential": True, "value": client_id},
        exp={"essential": True}, sub={"essential": True},
        nonce={"essential": True, "value": nonce},
    )
    try:
        token = jwt.decode(id_token, keys, algorithms=_ALGORITHMS)
        registry.validate(token.claims)
    except BadSignatureError:
        raise IdTokenRefused(SignInRefusal.BAD_SIGNATURE) from None
    except ExpiredTokenError:
        raise IdTokenRefused(SignInRefusal.EXPIRED_TOKEN) from None
    except ClaimError as e:
        raise IdTokenRefused(_CLAIM_REASONS.get(e.claim, SignInRefusal.INVALID_TOKEN)) from None
    except (JoseError, ValueError):
        raise IdTokenRefused(SignInRefusal.INVALID_TOKEN) from None
    claims = token.claims
    email = claims.get("email")
    return VerifiedIdentity(str(claims["sub"]), email if isinstance(email, str) else None,
                            claims.get("email_verified") is True)
