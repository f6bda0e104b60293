"""The Ed25519 key that signs evidence checkpoints, derived from SESSION_SECRET.

HKDF-SHA256 with a label of its own, like every key of tocsin/core/keys.py, so no other
signature can pass for a checkpoint's. Rotating SESSION_SECRET rotates this key: the new one
signs from then on, and checkpoints signed before still verify, because every public key
that ever signed is kept (control.evidence_keys) and each checkpoint names its key's id.
Verifying needs only the public key, never the secret.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tocsin.core.keys import require_strong_secret
from tocsin.core.settings import Settings

__all__ = ["CheckpointSigner", "checkpoint_signer", "key_id_of", "signature_holds", "signer_for"]

_SALT = b"tocsin evidence checkpoints v1"  # fixed: changing it would change every key


def key_id_of(public_key_hex: str) -> str:
    """A public key's id: the first 16 hex digits of the SHA-256 of its raw bytes."""
    return hashlib.sha256(bytes.fromhex(public_key_hex)).hexdigest()[:16]


@dataclass(frozen=True)
class CheckpointSigner:
    private_key: Ed25519PrivateKey
    public_key_hex: str

    @property
    def key_id(self) -> str:
        return key_id_of(self.public_key_hex)

    def sign(self, text: str) -> str:
        return self.private_key.sign(text.encode()).hex()

    def __repr__(self) -> str:
        return f"CheckpointSigner(key_id={self.key_id!r})"


def signer_for(secret: str) -> CheckpointSigner:
    seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT,
                info=b"tocsin/evidence-checkpoint").derive(secret.encode())
    key = Ed25519PrivateKey.from_private_bytes(seed)
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    return CheckpointSigner(key, public)


@lru_cache(maxsize=4)
def checkpoint_signer(settings: Settings) -> CheckpointSigner:
    """The current signing key, or ConfigError when the secret may not be used here."""
    require_strong_secret(settings)
    return signer_for(settings.session_secret)


def signature_holds(public_key_hex: str, text: str, signature_hex: str) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key_hex)).verify(
            bytes.fromhex(signature_hex), text.encode())
    except (InvalidSignature, ValueError):
        return False
    return True
