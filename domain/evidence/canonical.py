"""The chain's canonical encoding, in Python (the tenant migration 0050 renders the same
bytes in SQL, and the bundled pack verifier repeats this module; a test proves all agree).

A fact is a JSON object with its keys sorted, no whitespace (``,`` and ``:``), strings
escaped only where JSON requires it (``"``, ``\\``, control characters) and otherwise kept as
UTF-8; integers in decimal; booleans and null as JSON's; instants in UTC with microseconds
(``2026-12-04T11:47:57.123456Z``); calendar dates as ``2026-12-04``; UUIDs in lower case.

A chained record's hash is the SHA-256, in lower-case hex, of the UTF-8 bytes of
``prev_hash|seq|kind|ref|payload``; the first record's ``prev_hash`` is 64 zeros.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, date, datetime
from uuid import UUID

__all__ = [
    "GENESIS", "JsonValue", "canonical_payload", "canonical_value", "chain_hash", "checkpoint_text",
    "personal_digest",
]

GENESIS = "0" * 64  # the previous hash of sequence 1

JsonValue = str | int | bool | None


def canonical_value(value: object) -> JsonValue:
    """One column's value as the chain records it."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("an instant without a time zone has no canonical form")
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"no canonical form for {type(value).__name__}")


def canonical_payload(fields: Mapping[str, object]) -> str:
    """A fact's fields as its canonical JSON text."""
    return json.dumps({k: canonical_value(v) for k, v in fields.items()}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)


def chain_hash(prev_hash: str, seq: int, kind: str, ref: str, payload: str) -> str:
    return hashlib.sha256(f"{prev_hash}|{seq}|{kind}|{ref}|{payload}".encode()).hexdigest()


def personal_digest(salt: bytes, value: str) -> str:
    """A personal value as a fact records it: its salted SHA-256. Once the salt is deleted
    (the person erased), nobody can tell which value it was, and the chain still links."""
    return "sha256:" + hashlib.sha256(salt + value.encode()).hexdigest()


def checkpoint_text(tenant: str, seq: int, head_hash: str, signed_at: datetime, key_id: str) -> str:
    """What a checkpoint's Ed25519 signature covers: its fields as canonical JSON."""
    return canonical_payload({"head_hash": head_hash, "key_id": key_id, "seq": seq,
                              "signed_at": signed_at, "tenant": tenant})
