"""One email per signed checkpoint to the organisation's compliance address: the row is
written with the checkpoint (the durable intent), then claimed under a lease, sent through
the email provider and recorded (sent, or failed with its error class). A second sender finds
it claimed or sent; one that died mid-send leaves a lease that runs out, and the clock's next
periodic verification sends it again, with the same Message-ID."""

from __future__ import annotations

import json
from dataclasses import dataclass

import psycopg

from db.platform.effects import SendCheckpointEmails
from db.platform.tenancy import TenantTx

__all__ = [
    "CHECKPOINT_EMAIL_ATTEMPTS",
    "CHECKPOINT_EMAIL_LEASE",
    "ClaimedCheckpointEmail",
    "claim_checkpoint_email",
    "open_checkpoint_emails",
    "queue_checkpoint_email",
    "queue_checkpoint_email_tx",
    "record_checkpoint_email",
]

CHECKPOINT_EMAIL_LEASE = "5 minutes"  # a claimed email is sent within this, or claimed again
CHECKPOINT_EMAIL_ATTEMPTS = 5  # transient failures before the email is recorded as failed


def queue_checkpoint_email(conn: psycopg.Connection[tuple[object, ...]], checkpoint_id: int) -> bool:
    """In the checkpoint's own transaction: its email to the compliance address, when there is
    one. Whether one was queued."""
    row = conn.execute(
        "INSERT INTO evidence_checkpoint_emails (checkpoint_id, address) "
        "SELECT %s, compliance_email FROM evidence_settings WHERE compliance_email IS NOT NULL "
        "ON CONFLICT DO NOTHING RETURNING checkpoint_id", [checkpoint_id]).fetchone()
    return row is not None


def queue_checkpoint_email_tx(tx: TenantTx, checkpoint_id: int) -> None:
    """The same in a tenant transaction, whose commit hands the email to the sender."""
    if queue_checkpoint_email(tx.conn, checkpoint_id):
        tx.after_commit(SendCheckpointEmails([checkpoint_id]))


@dataclass(frozen=True)
class ClaimedCheckpointEmail:
    checkpoint_id: int
    address: str
    attempts: int
    tenant_name: str
    checkpoint: dict[str, object]  # as Checkpoint.as_json gives it


def claim_checkpoint_email(tx: TenantTx, checkpoint_id: int) -> ClaimedCheckpointEmail | None:
    """Take the email for sending (None: sent, failed, or being sent by someone else)."""
    from db.evidence.checkpoints import checkpoint_by_id

    row = tx.conn.execute(
        "UPDATE evidence_checkpoint_emails SET state = 'sending', attempts = attempts + 1, "
        f"lease_until = now() + interval '{CHECKPOINT_EMAIL_LEASE}' "
        "WHERE checkpoint_id = %s AND (state = 'pending' OR (state = 'sending' AND lease_until < now())) "
        "RETURNING address, attempts", [checkpoint_id]).fetchone()
    if row is None:
        return None
    checkpoint = checkpoint_by_id(tx, checkpoint_id)
    return ClaimedCheckpointEmail(checkpoint_id, str(row[0]), int(str(row[1])), tx.tenant.name,
                                  json.loads(json.dumps(checkpoint.as_json(), default=str)))


def record_checkpoint_email(tx: TenantTx, checkpoint_id: int, *, provider_message_id: str | None = None,
                            error: str | None = None, retry: bool = False) -> None:
    """The provider's answer: accepted (its message id), or an error, retried later or final."""
    if provider_message_id is not None:
        tx.conn.execute("UPDATE evidence_checkpoint_emails SET state = 'sent', sent_at = now(), "
                        "provider_message_id = %s, error = NULL, lease_until = NULL "
                        "WHERE checkpoint_id = %s AND state = 'sending'",
                        [provider_message_id, checkpoint_id])
        return
    tx.conn.execute(
        "UPDATE evidence_checkpoint_emails SET state = CASE WHEN %s AND attempts < %s THEN 'pending' "
        "ELSE 'failed' END, error = %s, lease_until = NULL WHERE checkpoint_id = %s AND state = 'sending'",
        [retry, CHECKPOINT_EMAIL_ATTEMPTS, (error or "")[:500], checkpoint_id])


def open_checkpoint_emails(tx: TenantTx) -> list[int]:
    """Checkpoints whose email is still to send (pending, or its sender's lease ran out)."""
    rows = tx.conn.execute(
        "SELECT checkpoint_id FROM evidence_checkpoint_emails WHERE state = 'pending' "
        "OR (state = 'sending' AND lease_until < now()) ORDER BY checkpoint_id").fetchall()
    return [int(str(r[0])) for r in rows]
