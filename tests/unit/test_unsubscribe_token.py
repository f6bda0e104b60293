"""The unsubscribe token: scoped to tenant, user and category; nothing else verifies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain.delivery.unsubscribe import UnsubscribeScope, read_unsubscribe_token, unsubscribe_token
from domain.errors import InvalidInput
from domain.tokens import TokenExpired, TokenInvalid, sign

SECRET = b"test-secret"
NOW = datetime(2027, 1, 1, tzinfo=UTC)


def test_a_token_names_its_tenant_user_and_category_for_sixty_days() -> None:
    token = unsubscribe_token(SECRET, "acme", 42, "report_ready", NOW)
    assert read_unsubscribe_token([SECRET], token, NOW + timedelta(days=59)) == UnsubscribeScope(
        "acme", 42, "report_ready")
    with pytest.raises(TokenExpired):
        read_unsubscribe_token([SECRET], token, NOW + timedelta(days=60))


def test_other_secrets_purposes_and_malformed_claims_do_not_verify() -> None:
    token = unsubscribe_token(SECRET, "acme", 42, "report_ready", NOW)
    with pytest.raises(TokenInvalid):
        read_unsubscribe_token([b"another-secret"], token, NOW)
    invite = sign(SECRET, "invite", {"tenant": "acme", "user": 42, "category": "report_ready"},
                  NOW + timedelta(days=1))
    with pytest.raises(TokenInvalid):
        read_unsubscribe_token([SECRET], invite, NOW)
    for claims in ({"tenant": "acme", "user": "42", "category": "report_ready"},
                   {"tenant": "acme", "user": 42, "category": "spam"},
                   {"tenant": "acme", "user": 42}):
        bad = sign(SECRET, "unsubscribe", dict(claims), NOW + timedelta(days=1))
        with pytest.raises(TokenInvalid):
            read_unsubscribe_token([SECRET], bad, NOW)
    with pytest.raises(InvalidInput):
        unsubscribe_token(SECRET, "acme", 42, "spam", NOW)
