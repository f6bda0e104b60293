"""The unsubscribe link's token: scoped to one tenant, one user and one category, signed
(domain.tokens, purpose "unsubscribe") and valid for 60 days."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from domain.delivery.preferences import valid_category
from domain.errors import InvalidInput
from domain.tokens import TokenInvalid, sign, verify

__all__ = ["LIFETIME", "PURPOSE", "UnsubscribeScope", "read_unsubscribe_token", "unsubscribe_token"]

PURPOSE = "unsubscribe"
LIFETIME = timedelta(days=60)


@dataclass(frozen=True)
class UnsubscribeScope:
    tenant: str
    user_id: int
    category: str


def unsubscribe_token(key: bytes, tenant: str, user_id: int, category: str, now: datetime) -> str:
    """For the email's List-Unsubscribe header: `{portal_url}/unsubscribe/{token}`."""
    claims: dict[str, str | int] = {"tenant": tenant, "user": user_id, "category": valid_category(category)}
    return sign(key, PURPOSE, claims, now + LIFETIME)


def read_unsubscribe_token(keys: Sequence[bytes], token: str, now: datetime) -> UnsubscribeScope:
    """The token's scope, or TokenInvalid / TokenExpired (both InvalidInput)."""
    claims = verify(keys, PURPOSE, token, now)
    tenant, user, category = claims.get("tenant"), claims.get("user"), claims.get("category")
    if not isinstance(tenant, str) or not isinstance(user, int) or not isinstance(category, str):
        raise TokenInvalid("This link is not valid.")
    try:
        valid_category(category)
    except InvalidInput:
        raise TokenInvalid("This link is not valid.") from None
    return UnsubscribeScope(tenant, user, category)
