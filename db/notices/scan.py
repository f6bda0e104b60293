"""One tenant's scan at an explicit instant, the use case behind the scan actor
(actors/scan.py) and `tocsin scan`: licence milestones claimed, the time rules' claims made,
the claims prepared into inbox rows and deliveries, the due deliveries scheduled, all in one
transaction; the emails go out once it has committed (SendEmails effects)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime

from db.delivery.deliveries import schedule_due_deliveries
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import ClaimCounts, claim_due_milestones
from db.notices.scan_horizon import next_scan_instant
from db.platform.next_work import begin_scan_visit, mute_own_notes, record_next_scan
from db.platform.runs import record_completed
from db.platform.tenancy import TenantTx, tenant_tx
from db.rules.time_rules import TimeClaimCounts, claim_time_rules
from domain.liveness import RunKind

__all__ = ["ScanReport", "run_scan"]

log = logging.getLogger("tocsin.scan")


@dataclass(frozen=True)
class ScanReport:
    tenant: str
    counts: ClaimCounts
    time: TimeClaimCounts  # the tenant's time rules (obligations, turnarounds)
    prepared: int  # claims turned into inbox rows and deliveries
    enqueued: int  # email messages enqueued after commit
    # The next-work summary (db/platform/next_work.py) said nothing was due here at this
    # instant, and the scan found work: what the summary missed (goal: never).
    summary_missed: bool = False

    @property
    def found_work(self) -> bool:
        """Claims made or recorded skipped, licences moved, waiting claims cancelled."""
        c, t = self.counts, self.time
        return bool(c.claimed or c.skipped or c.expired or c.closed
                    or t.claimed or t.skipped or t.cancelled)


def run_scan(slug: str, as_of: datetime) -> ScanReport:
    """One tenant's scan at an explicit instant. Safe to run any number of times, at once
    or in sequence: what is claimed is skipped, what is unsent is enqueued again.

    The emails and the live-inbox announcements go out once the transaction has committed
    (db/platform/tenancy.py): a message must never name a row that might still roll back. If this
    process dies before (or while) enqueueing, the sweeper sends the rows later.

    The time rules' claims are prepared by the rules' own path once this transaction has
    committed (their product's preparation queue; the sweeper's unprepared_rule_claims if
    that message is lost).

    The tenant's next instant is recorded in the next-work summary once this has committed
    (db/platform/next_work.py: a change committed meanwhile keeps the tenant due)."""
    visit = begin_scan_visit(slug, as_of)
    with tenant_tx(slug, once_per_tick=True) as tx:
        mute_own_notes(tx)  # this scan's writes are in the instant it computes
        counts = claim_due_milestones(tx, as_of)
        time_counts = _time_rules_apart(tx, as_of)
        prepared = prepare_claims(tx, as_of)
        to_send = schedule_due_deliveries(tx)
        # For `tocsin status` and the next tick's order; in the scan's own transaction, so
        # that a scan costs one transaction (one tenant lookup, one commit), not two.
        record_completed(tx, RunKind.SCAN)
        next_at = next_scan_instant(tx, as_of)
        # Nothing sent or announced: its commit need not wait for the WAL flush (what it
        # wrote is redone by the next scan if a crash loses it).
        tx.commit_unflushed_if_nothing_leaves()
    report = ScanReport(slug, counts, time_counts, prepared, len(to_send))
    if visit is None:
        return report
    record_next_scan(visit, next_at)
    if visit.summary_said_idle and report.found_work:
        return replace(report, summary_missed=True)
    return report


def _time_rules_apart(tx: TenantTx, as_of: datetime) -> TimeClaimCounts:
    """The time rules' part of a scan in a savepoint: whatever fails there (each rule has a
    savepoint of its own inside) undoes only its own claims, never the licence claims made
    before it in the same transaction."""
    try:
        with tx.savepoint():  # its claims and their effects undone together
            counts = claim_time_rules(tx, as_of)
    except Exception as error:
        log.exception("tenant=%s time rules' scan failed (licence claims kept)", tx.tenant.slug)
        return TimeClaimCounts(failed=(f"the time rules' scan: {type(error).__name__}: {error}",))
    for failure in counts.failed:
        log.error("tenant=%s time rule failed alone: %s", tx.tenant.slug, failure)
    return counts
