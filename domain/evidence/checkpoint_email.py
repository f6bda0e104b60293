"""The email that carries a copy of a signed checkpoint to the organisation's compliance
address, so that a copy lives outside the database: its subject, its text (the checkpoint's
signed JSON, verbatim, and how to check it) and its Message-ID (the same for every attempt)."""

from __future__ import annotations

import json
from collections.abc import Mapping

__all__ = ["checkpoint_email", "checkpoint_message_id"]


def checkpoint_message_id(tenant_slug: str, checkpoint_id: int, sender_domain: str) -> str:
    """The RFC 5322 Message-ID of a checkpoint's email: a resend is recognisably the same."""
    return f"<evidence-checkpoint-{checkpoint_id}.{tenant_slug}@{sender_domain}>"


def checkpoint_email(tenant_name: str, checkpoint: Mapping[str, object]) -> tuple[str, str]:
    """(subject, text) for ``checkpoint`` as Checkpoint.as_json gives it."""
    subject = (f"Signed checkpoint of {tenant_name}'s evidence chain: sequence "
               f"{checkpoint['seq']} ({checkpoint['reason']})")
    text = f"""Tocsin signed a checkpoint of {tenant_name}'s evidence chain.

Sequence:   {checkpoint['seq']}
Head hash:  {checkpoint['head_hash']}
Signed at:  {json.loads(str(checkpoint['signed_text']))['signed_at']}
Key id:     {checkpoint['key_id']}
Public key: {checkpoint['public_key']} (Ed25519, raw, hex)
Why:        {checkpoint['reason']}

Keep this email: it is a copy of the checkpoint outside Tocsin's database. Later, anyone can
check that the chain still holds this head hash at this sequence (`tocsin evidence verify`
checks every checkpoint kept in the database; this copy shows whether those were rewritten).
The signature is Ed25519 over the exact text of "signed_text" below, encoded as UTF-8.

{json.dumps(dict(checkpoint), sort_keys=True, indent=2)}

You receive this because this address is your organisation's compliance address in Tocsin
(Settings, Evidence). An administrator can change or remove it there.
"""
    return subject, text
