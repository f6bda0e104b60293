"""The organisation's evidence settings, set by its administrators (Settings, Evidence): the
compliance address that receives a copy of every signed checkpoint, and how long message
bodies and addresses are kept (db/evidence/retention.py). Each change is audited."""

from __future__ import annotations

from dataclasses import dataclass

from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx
from domain.errors import InvalidInput
from domain.people.identity import valid_email

__all__ = ["MAX_RETENTION_DAYS", "EvidenceSettings", "evidence_settings", "set_evidence_settings"]

MAX_RETENTION_DAYS = 36_500  # days (100 years): the migration's CHECK says the same


@dataclass(frozen=True)
class EvidenceSettings:
    compliance_email: str | None  # receives every signed checkpoint; None: nobody
    retention_days: int | None  # message bodies and addresses kept this long; None: for ever


def evidence_settings(tx: TenantTx) -> EvidenceSettings:
    row = tx.conn.execute("SELECT compliance_email, retention_days FROM evidence_settings").fetchone()
    if row is None:
        return EvidenceSettings(None, None)
    return EvidenceSettings(None if row[0] is None else str(row[0]),
                            None if row[1] is None else int(str(row[1])))


def set_evidence_settings(tx: TenantTx, compliance_email: str | None,
                          retention_days: int | None) -> EvidenceSettings:
    """Save both settings (None clears one); a change is recorded in the audit log."""
    email = valid_email(compliance_email) if compliance_email else None
    if retention_days is not None and not 1 <= retention_days <= MAX_RETENTION_DAYS:
        raise InvalidInput(f"keep message bodies and addresses between 1 and {MAX_RETENTION_DAYS:,} "
                           "days, or leave the field empty to keep them for ever")
    before = evidence_settings(tx)
    after = EvidenceSettings(email, retention_days)
    tx.conn.execute("UPDATE evidence_settings SET compliance_email = %s, retention_days = %s, "
                    "updated_at = now()", [email, retention_days])
    if after != before:
        record_audit(tx, "settings.evidence", "tenant", tx.tenant.slug,
                     before={"compliance_email": before.compliance_email,
                             "retention_days": before.retention_days},
                     after={"compliance_email": email, "retention_days": retention_days})
    return after
