"""Signed checkpoints of a tenant's evidence chain: (tenant, sequence, head hash, time)
signed with Ed25519 (tocsin/core/evidence_signing.py), periodically and at every export.
Each is kept in the tenant's schema and may also be written to a file outside the database."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from db.evidence.audit import record_audit_alone
from db.evidence.chain import seal_tenant
from db.evidence.checkpoint_emails import queue_checkpoint_email_tx
from db.platform.tenancy import TenantTx, tenant_tx
from domain.errors import NotFound
from domain.evidence.canonical import checkpoint_text
from tocsin.core.clock import utcnow
from tocsin.core.evidence_signing import CheckpointSigner, checkpoint_signer
from tocsin.core.settings import Settings

__all__ = [
    "Checkpoint", "checkpoint_and_keep", "checkpoint_by_id", "checkpoints", "known_keys", "sign_checkpoint",
    "write_checkpoint_file",
]


@dataclass(frozen=True)
class Checkpoint:
    id: int
    tenant: str
    seq: int
    head_hash: str
    signed_at: datetime
    reason: str
    key_id: str
    public_key: str
    signature: str

    @property
    def text(self) -> str:
        return checkpoint_text(self.tenant, self.seq, self.head_hash, self.signed_at, self.key_id)

    def as_json(self) -> dict[str, object]:
        fields = asdict(self)
        fields["signed_at"] = json.loads(self.text)["signed_at"]
        fields["signed_text"] = self.text
        return fields


def sign_checkpoint(slug: str, reason: str, signer: CheckpointSigner) -> Checkpoint:
    """Seal what is pending, then sign the head as it stands (held still while signing)."""
    seal_tenant(slug)
    with tenant_tx(slug) as tx:
        head = tx.conn.execute("SELECT seq, hash FROM evidence_head FOR UPDATE").fetchone()
        assert head is not None
        seq, head_hash = int(str(head[0])), str(head[1])
        signed_at = utcnow()
        tx.conn.execute("INSERT INTO control.evidence_keys (key_id, public_key) VALUES (%s, %s) "
                        "ON CONFLICT DO NOTHING", [signer.key_id, signer.public_key_hex])
        signature = signer.sign(checkpoint_text(tx.tenant.slug, seq, head_hash, signed_at, signer.key_id))
        row = tx.conn.execute(
            "INSERT INTO evidence_checkpoints (seq, head_hash, signed_at, reason, key_id, signature) "
            "VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
            [seq, head_hash, signed_at, reason, signer.key_id, signature]).fetchone()
        assert row is not None
        queue_checkpoint_email_tx(tx, int(str(row[0])))  # a copy to the compliance address
    return Checkpoint(int(str(row[0])), tx.tenant.slug, seq, head_hash, signed_at, reason, signer.key_id,
                      signer.public_key_hex, signature)


def checkpoints(tx: TenantTx, *, upto_seq: int | None = None, limit: int | None = None) -> list[Checkpoint]:
    """The tenant's checkpoints, newest first, each with its key's public half."""
    rows = tx.conn.execute(
        "SELECT c.id, c.seq, c.head_hash, c.signed_at, c.reason, c.key_id, coalesce(k.public_key, ''), "
        "c.signature FROM evidence_checkpoints c LEFT JOIN control.evidence_keys k ON k.key_id = c.key_id "
        "WHERE %(upto)s::bigint IS NULL OR c.seq <= %(upto)s ORDER BY c.id DESC LIMIT %(limit)s",
        {"upto": upto_seq, "limit": limit}).fetchall()
    return [_checkpoint(tx, r) for r in rows]


def checkpoint_by_id(tx: TenantTx, checkpoint_id: int) -> Checkpoint:
    rows = tx.conn.execute(
        "SELECT c.id, c.seq, c.head_hash, c.signed_at, c.reason, c.key_id, coalesce(k.public_key, ''), "
        "c.signature FROM evidence_checkpoints c LEFT JOIN control.evidence_keys k ON k.key_id = c.key_id "
        "WHERE c.id = %s", [checkpoint_id]).fetchall()
    if not rows:
        raise NotFound(f"no checkpoint {checkpoint_id}")
    return _checkpoint(tx, rows[0])


def _checkpoint(tx: TenantTx, r: tuple[object, ...]) -> Checkpoint:
    assert isinstance(r[3], datetime)
    return Checkpoint(int(str(r[0])), tx.tenant.slug, int(str(r[1])), str(r[2]), r[3], str(r[4]),
                      str(r[5]), str(r[6]), str(r[7]))


def known_keys(tx: TenantTx) -> list[tuple[str, str, datetime]]:
    """Every public key that ever signed a checkpoint: (key id, public key hex, first used)."""
    rows = tx.conn.execute(
        "SELECT key_id, public_key, first_used_at FROM control.evidence_keys ORDER BY first_used_at"
    ).fetchall()
    return [(str(r[0]), str(r[1]), r[2]) for r in rows if isinstance(r[2], datetime)]


def write_checkpoint_file(folder: Path, checkpoint: Checkpoint) -> Path:
    """Append the checkpoint as one JSON line to ``<folder>/<tenant>.checkpoints.jsonl``: a
    copy outside the database, which an inspector can hold the chain against later."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{checkpoint.tenant}.checkpoints.jsonl"
    with path.open("a", encoding="utf-8") as file:
        file.write(json.dumps(checkpoint.as_json(), sort_keys=True) + "\n")
    return path


def checkpoint_and_keep(slug: str, reason: str, settings: Settings) -> tuple[Checkpoint, Path | None]:
    """Sign a checkpoint with the current key and, when EVIDENCE_CHECKPOINT_DIR is set, write
    its copy there; the file it went to, if any."""
    checkpoint = sign_checkpoint(slug, reason, checkpoint_signer(settings))
    if reason != "periodic":  # the clock's own checkpoints are the machinery's work
        record_audit_alone(slug, f"evidence.checkpoint.{reason}", "evidence_checkpoint", checkpoint.id,
                           after={"seq": checkpoint.seq, "key_id": checkpoint.key_id})
    folder = settings.evidence_checkpoint_dir
    return checkpoint, None if folder is None else write_checkpoint_file(folder, checkpoint)
