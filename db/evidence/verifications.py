"""The periodic verification of a tenant's evidence: each run recorded (the evidence page
shows the last), and an ops alert raised once per break, not once per run that finds it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from db.evidence.chain import seal_tenant
from db.evidence.verify import verify_tenant
from db.platform.effects import PublishAlerts
from db.platform.tenancy import TenantTx, tenant_tx
from domain.evidence.verification import ChainReport

__all__ = ["Verification", "last_verification", "verify_and_record"]


@dataclass(frozen=True)
class Verification:
    verified_at: datetime
    records: int
    head_seq: int
    ok: bool
    first_break: str | None
    seconds: float
    alerted: bool = False  # this run raised the ops alert for its break

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def verify_and_record(slug: str) -> tuple[ChainReport, Verification]:
    """Seal what is pending, verify, and record the result; a break no earlier run reported
    raises an ops alert (published once this transaction commits)."""
    seal_tenant(slug)
    started = time.perf_counter()
    report = verify_tenant(slug)
    seconds = time.perf_counter() - started
    first = report.first_break
    with tenant_tx(slug) as tx:
        seen_before = first is not None and tx.conn.execute(
            "SELECT 1 FROM evidence_verifications WHERE break_key = %s LIMIT 1", [first.key]).fetchone()
        row = tx.conn.execute(
            "INSERT INTO evidence_verifications (records, head_seq, ok, first_break, break_key, seconds) "
            "VALUES (%s, %s, %s, %s, %s, %s) RETURNING id, verified_at",
            [report.records, report.head_seq, report.ok, first.describe() if first else None,
             first.key if first else None, seconds]).fetchone()
        assert row is not None and isinstance(row[1], datetime)
        alerted = False
        if first is not None and not seen_before:
            tx.conn.execute(
                "INSERT INTO ops_alerts (kind, ref_id, summary) VALUES ('evidence_break', %s, %s) "
                "ON CONFLICT (kind, ref_id) DO NOTHING",
                [row[0], f"evidence chain broken ({len(report.breaks)} break(s)); first: {first.describe()}"])
            tx.after_commit(PublishAlerts())
            alerted = True
    return report, Verification(row[1], report.records, report.head_seq, report.ok,
                                first.describe() if first else None, seconds, alerted)


def last_verification(tx: TenantTx) -> Verification | None:
    row = tx.conn.execute(
        "SELECT verified_at, records, head_seq, ok, first_break, seconds FROM evidence_verifications "
        "ORDER BY id DESC LIMIT 1").fetchone()
    if row is None:
        return None
    assert isinstance(row[0], datetime) and isinstance(row[5], float)
    return Verification(row[0], int(str(row[1])), int(str(row[2])), bool(row[3]),
                        None if row[4] is None else str(row[4]), row[5])
