"""Whether the background machinery runs: one verdict for `tocsin status` and /healthz.

Degraded when a queue has no live consumer (a queue the product uses, or any queue with
messages waiting) or when an active tenant's sweep is overdue (domain/liveness.py: no
sweep completed for OVERDUE_INTERVALS sweep intervals plus a grace).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from db.platform.runs import TenantRuns, last_runs_of_active_tenants
from domain.liveness import RunKind, sweep_is_overdue, sweep_overdue_after
from tocsin.messaging.queues import QueueInspector, QueueState

__all__ = ["MachineryStatus", "TenantLiveness", "machinery_status", "tenant_liveness"]


@dataclass(frozen=True)
class TenantLiveness:
    runs: TenantRuns
    sweep_overdue: bool

    @property
    def slug(self) -> str:
        return self.runs.slug

    def age(self, kind: RunKind) -> timedelta | None:
        """Time since the last completed run of this kind; None when none has completed."""
        at = {RunKind.SCAN: self.runs.scan, RunKind.SWEEP: self.runs.sweep,
              RunKind.DIGEST: self.runs.digest}[kind]
        return None if at is None else self.runs.as_of - at


def tenant_liveness(runs: TenantRuns, sweep_interval_seconds: int) -> TenantLiveness:
    return TenantLiveness(runs, sweep_is_overdue(runs.sweep, runs.created_at, runs.as_of,
                                                 sweep_interval_seconds))


@dataclass(frozen=True)
class MachineryStatus:
    queues: list[QueueState]
    tenants: list[TenantLiveness]
    sweep_overdue_after: timedelta

    @property
    def problems(self) -> list[str]:
        """One sentence per thing an operator must fix; empty when all is well."""
        return self.queue_problems + self.tenant_problems

    @property
    def queue_problems(self) -> list[str]:
        return [f"queue {q.name!r} has no live consumer ({q.ready} ready, {q.delayed} delayed)"
                for q in self.queues if q.unconsumed]

    @property
    def tenant_problems(self) -> list[str]:
        found = []
        limit = int(self.sweep_overdue_after.total_seconds())
        for t in self.tenants:
            if t.sweep_overdue:
                age = t.age(RunKind.SWEEP)
                since = "has never completed" if age is None else \
                    f"last completed {int(age.total_seconds())} s ago"
                found.append(f"tenant {t.slug!r}: the sweep {since} (overdue after {limit} s)")
        return found

    @property
    def ok(self) -> bool:
        return not self.problems


def machinery_status(inspector: QueueInspector, sweep_interval_seconds: int,
                     tenant: str | None = None, *, discover_queues: bool = False) -> MachineryStatus:
    """Raises QueuesUnavailable or DatabaseUnavailable when Redis or PostgreSQL is down.
    ``discover_queues`` also judges queues no one names that hold messages (a keyspace scan)."""
    queues = inspector.states(discover=discover_queues)
    tenants = [tenant_liveness(r, sweep_interval_seconds) for r in last_runs_of_active_tenants()
               if tenant is None or r.slug == tenant]
    return MachineryStatus(queues, tenants, sweep_overdue_after(sweep_interval_seconds))
