"""The keys every signature of Tocsin uses, all derived from SESSION_SECRET.

One secret protects the session cookies, the CSRF tokens, invitation links and unsubscribe
links; each purpose gets its own key (HKDF-SHA256 with the purpose as label), so a value
signed for one purpose never verifies for another, whatever the payload looks like.

Rotation: SESSION_SECRET_PREVIOUS lists secrets whose keys still verify (links already
mailed, sessions already open) but never sign; new signatures always use SESSION_SECRET.

The published default, or any secret shorter than MIN_SECRET_BYTES, yields no keys at all
unless the process runs on the embedded services (TOCSIN_EMBEDDED=1, set only by
`tocsin up` when it started PostgreSQL itself): anyone who reads the source could otherwise
mint an administrator's invitation link.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from tocsin.core.settings import DEV_SESSION_SECRET, ConfigError, Secrets, Settings

__all__ = [
    "KEY_BYTES",
    "MIN_SECRET_BYTES",
    "SECRET_FILE",
    "SECRET_FILE_MODE",
    "KeyRing",
    "Purpose",
    "SigningKeys",
    "derive_key",
    "kept_session_secret",
    "require_strong_secret",
    "signing_keys",
    "weak_secret_reason",
]

MIN_SECRET_BYTES = 32  # bytes (UTF-8) of SESSION_SECRET outside the embedded services
KEY_BYTES = 32  # bytes of each derived key (HMAC-SHA256)
_SALT = b"tocsin signing keys v1"  # fixed: changing it would invalidate every signature


class Purpose(StrEnum):
    SESSION = "session"
    CSRF = "csrf"
    INVITATION = "invitation"
    UNSUBSCRIBE = "unsubscribe"


@dataclass(frozen=True)
class KeyRing:
    """The keys of one purpose: sign with ``current``; accept any of ``verifying``."""

    current: bytes
    previous: tuple[bytes, ...] = ()

    @property
    def verifying(self) -> tuple[bytes, ...]:
        return (self.current, *self.previous)


def derive_key(secret: str, purpose: Purpose) -> bytes:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=_SALT,
                info=f"tocsin/{purpose.value}".encode())
    return hkdf.derive(secret.encode())


def weak_secret_reason(secret: str) -> str | None:
    """Why this secret must not guard a real deployment, or None."""
    if secret == DEV_SESSION_SECRET:
        return "is the published development default"
    if len(secret.encode()) < MIN_SECRET_BYTES:
        return f"is shorter than {MIN_SECRET_BYTES} bytes"
    return None


def require_strong_secret(settings: Settings | Secrets) -> None:
    """ConfigError, one line naming the setting, unless every secret is strong enough (or
    the process runs on the embedded services, where `tocsin up` generated it)."""
    if settings.embedded:
        return
    named = [("SESSION_SECRET", settings.session_secret)]
    named += [("SESSION_SECRET_PREVIOUS", s) for s in settings.previous_session_secrets]
    for name, secret in named:
        reason = weak_secret_reason(secret)
        if reason is not None:
            raise ConfigError(
                f"{name} {reason}: set a random secret of at least {MIN_SECRET_BYTES} bytes "
                "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(48))'`)"
            )


@dataclass(frozen=True)
class SigningKeys:
    session: KeyRing
    csrf: KeyRing
    invitation: KeyRing
    unsubscribe: KeyRing

    def __repr__(self) -> str:
        return "SigningKeys(***)"


@lru_cache(maxsize=4)  # derived once per settings object: every email asks for its key
def signing_keys(settings: Settings) -> SigningKeys:
    """Every purpose's keys, or ConfigError if the secret may not be used here."""
    require_strong_secret(settings)

    def ring(purpose: Purpose) -> KeyRing:
        return KeyRing(derive_key(settings.session_secret, purpose),
                       tuple(derive_key(s, purpose) for s in settings.previous_session_secrets))

    return SigningKeys(session=ring(Purpose.SESSION), csrf=ring(Purpose.CSRF),
                       invitation=ring(Purpose.INVITATION), unsubscribe=ring(Purpose.UNSUBSCRIBE))


SECRET_FILE = "session-secret"  # under TOCSIN_HOME, mode 0600
SECRET_FILE_MODE = 0o600


def kept_session_secret(home: Path) -> str:
    """The embedded services' secret: generated at the first `tocsin up`, then read back, so
    sessions and mailed links survive a restart. Only the owner may read it."""
    path = home / SECRET_FILE
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, SECRET_FILE_MODE)
    except FileExistsError:
        secret = path.read_text().strip()
        if weak_secret_reason(secret) is None:
            return secret
        raise ConfigError(f"{path} holds no usable secret: delete it to generate a new one") from None
    with os.fdopen(descriptor, "w") as file:
        file.write(secrets.token_urlsafe(48) + "\n")
    return path.read_text().strip()
