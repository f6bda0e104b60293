"""Signed, expiring tokens for links that act without a login (unsubscribe, invitations).

A token is ``payload.signature``: the payload is URL-safe base64 of compact JSON that
carries its own expiry; the signature is HMAC-SHA256 over the purpose and the payload with
the purpose's own key (tocsin.core.keys derives one per purpose), so a token minted for
one purpose never verifies for another. Verification accepts a list of keys (the current
one first, then those of previous secrets), so rotating the secret does not break links
already sent. Single use, where a purpose needs it, is enforced by whoever stores the
token's effect (invitations), not here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Sequence
from datetime import datetime

from domain.errors import InvalidInput

__all__ = ["MAX_TOKEN_LENGTH", "TokenExpired", "TokenInvalid", "sign", "signed_by_any", "verify"]

MAX_TOKEN_LENGTH = 2048  # longer input is refused before any decoding


class TokenInvalid(InvalidInput):
    """Tampered, truncated, or signed for another purpose or with another key."""


class TokenExpired(InvalidInput):
    """Well signed, but past its expiry."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(key: bytes, purpose: str, payload: str) -> str:
    mac = hmac.new(key, f"{purpose}.{payload}".encode(), hashlib.sha256)
    return _b64(mac.digest())


def signed_by_any(keys: Sequence[bytes], purpose: str, payload: str, signature: str) -> bool:
    """Whether one of ``keys`` made ``signature`` (each compared in constant time)."""
    return any(hmac.compare_digest(signature, _signature(key, purpose, payload)) for key in keys)


def sign(key: bytes, purpose: str, claims: dict[str, str | int], expires_at: datetime) -> str:
    if "exp" in claims:
        raise ValueError("'exp' is set from expires_at")
    body = json.dumps({**claims, "exp": int(expires_at.timestamp())}, separators=(",", ":"),
                      sort_keys=True)
    payload = _b64(body.encode())
    return f"{payload}.{_signature(key, purpose, payload)}"


def verify(keys: Sequence[bytes], purpose: str, token: str, now: datetime) -> dict[str, str | int]:
    """The token's claims (without 'exp'), or TokenInvalid / TokenExpired."""
    # Tokens are ASCII (base64url and a dot); anything else is refused before hmac, whose
    # compare_digest raises TypeError on non-ASCII text.
    if len(token) > MAX_TOKEN_LENGTH or not token.isascii() or token.count(".") != 1:
        raise TokenInvalid("This link is not valid.")
    payload, signature = token.split(".")
    if not signed_by_any(keys, purpose, payload, signature):
        raise TokenInvalid("This link is not valid.")
    try:
        claims = json.loads(_unb64(payload))
    except (binascii.Error, ValueError):
        raise TokenInvalid("This link is not valid.") from None
    if not isinstance(claims, dict) or not isinstance(claims.get("exp"), int):
        raise TokenInvalid("This link is not valid.")
    if now.timestamp() >= claims.pop("exp"):
        raise TokenExpired("This link has expired.")
    return claims
