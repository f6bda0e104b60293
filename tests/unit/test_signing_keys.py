"""The keys derived from SESSION_SECRET: one per purpose, rotation, and the start-up policy."""

from __future__ import annotations

import dataclasses
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from domain.tokens import TokenInvalid, sign, verify
from tocsin.core.keys import (
    MIN_SECRET_BYTES,
    Purpose,
    derive_key,
    kept_session_secret,
    require_strong_secret,
    signing_keys,
)
from tocsin.core.settings import DEV_SESSION_SECRET, ConfigError, load_settings

STRONG = "s" * MIN_SECRET_BYTES
OLD = "o" * MIN_SECRET_BYTES
NOW = datetime(2027, 3, 1, tzinfo=UTC)
BASE = {"DATABASE_URL": "postgresql://x/y", "REDIS_URL": "redis://x:1/0"}


def test_every_purpose_has_its_own_key() -> None:
    keys = {derive_key(STRONG, purpose) for purpose in Purpose}
    assert len(keys) == len(Purpose)
    assert STRONG.encode() not in keys


def test_rotation_verifies_with_previous_secrets_and_signs_with_the_current_one() -> None:
    before = signing_keys(load_settings({**BASE, "SESSION_SECRET": OLD}))
    after = signing_keys(load_settings({**BASE, "SESSION_SECRET": STRONG,
                                        "SESSION_SECRET_PREVIOUS": f" {OLD} ,"}))
    old_link = sign(before.invitation.current, "invite", {"invitation": 1}, NOW + timedelta(days=1))
    new_link = sign(after.invitation.current, "invite", {"invitation": 2}, NOW + timedelta(days=1))

    assert verify(after.invitation.verifying, "invite", old_link, NOW) == {"invitation": 1}
    assert after.invitation.current == derive_key(STRONG, Purpose.INVITATION)
    with pytest.raises(TokenInvalid):
        verify(before.invitation.verifying, "invite", new_link, NOW)


@pytest.mark.parametrize("env", [
    {}, {"SESSION_SECRET": DEV_SESSION_SECRET}, {"SESSION_SECRET": "x" * (MIN_SECRET_BYTES - 1)},
    {"SESSION_SECRET": STRONG, "SESSION_SECRET_PREVIOUS": "short"},
])
def test_the_default_or_a_short_secret_is_refused_outside_the_embedded_services(env: dict[str, str]) -> None:
    settings = load_settings({**BASE, **env})
    with pytest.raises(ConfigError, match="SESSION_SECRET"):
        require_strong_secret(settings)
    with pytest.raises(ConfigError):
        signing_keys(settings)
    embedded = dataclasses.replace(settings, embedded=True)
    require_strong_secret(embedded)
    assert signing_keys(embedded).session.current


def test_embedded_mode_is_only_the_explicit_setting() -> None:
    assert not load_settings({**BASE, "DATABASE_URL": "postgresql://localhost/x"}).embedded
    assert not load_settings({**BASE, "TOCSIN_EMBEDDED": "yes"}).embedded
    assert load_settings({**BASE, "TOCSIN_EMBEDDED": "1"}).embedded


def test_the_embedded_secret_is_generated_once_and_readable_only_by_its_owner(tmp_path: Path) -> None:
    first = kept_session_secret(tmp_path)
    assert kept_session_secret(tmp_path) == first
    assert len(first.encode()) >= MIN_SECRET_BYTES
    assert stat.S_IMODE((tmp_path / "session-secret").stat().st_mode) == 0o600
    (tmp_path / "session-secret").write_text("short\n")
    with pytest.raises(ConfigError, match="delete it"):
        kept_session_secret(tmp_path)


def test_the_secrets_never_show_in_the_settings_repr() -> None:
    shown = repr(load_settings({**BASE, "SESSION_SECRET": STRONG, "SESSION_SECRET_PREVIOUS": OLD}))
    assert STRONG not in shown and OLD not in shown
    assert repr(signing_keys(load_settings({**BASE, "SESSION_SECRET": STRONG}))) == "SigningKeys(***)"
