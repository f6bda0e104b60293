"""Signed, expiring link tokens: what verifies, and every way one must not."""

from datetime import UTC, datetime, timedelta

import pytest

from domain.tokens import TokenExpired, TokenInvalid, sign, verify

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
CLAIMS: dict[str, str | int] = {"tenant": "acme", "user": 7, "category": "license_expiring"}


def _token(**overrides: object) -> str:
    expires_at = overrides.get("expires_at", NOW + timedelta(days=1))
    assert isinstance(expires_at, datetime)
    return sign(b"secret", str(overrides.get("purpose", "unsubscribe")), CLAIMS, expires_at)


def test_a_fresh_token_verifies_to_its_claims() -> None:
    assert verify([b"secret"], "unsubscribe", _token(), NOW) == CLAIMS


def test_expired_token_is_refused_at_its_expiry_instant() -> None:
    token = _token(expires_at=NOW)
    with pytest.raises(TokenExpired):
        verify([b"secret"], "unsubscribe", token, NOW)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # signature changed
        lambda t: ("e" if t[0] != "e" else "f") + t[1:],  # payload changed
        lambda t: t.replace(".", ""),  # no separator
        lambda t: t + ".x",  # extra part
        lambda t: "",
        lambda t: "x" * 5000,
    ],
)
def test_tampered_tokens_are_invalid(mangle: object) -> None:
    assert callable(mangle)
    with pytest.raises(TokenInvalid):
        verify([b"secret"], "unsubscribe", mangle(_token()), NOW)


def test_a_token_for_another_purpose_or_key_is_invalid() -> None:
    with pytest.raises(TokenInvalid):
        verify([b"secret"], "invite", _token(), NOW)
    with pytest.raises(TokenInvalid):
        verify([b"other-secret"], "unsubscribe", _token(), NOW)


def test_exp_cannot_be_smuggled_in_as_a_claim() -> None:
    with pytest.raises(ValueError):
        sign(b"secret", "invite", {"exp": 1}, NOW)
