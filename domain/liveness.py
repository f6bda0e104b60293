"""When the background machinery counts as stopped for a tenant.

The sweeper is what recovers every pending thing (deferred emails, expired leases, lost
messages), so a tenant whose sweep has not completed for a few intervals has deliveries
that nobody is processing. Pure: the caller says when the last sweep completed and what
time it is now.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

__all__ = ["OVERDUE_GRACE_SECONDS", "OVERDUE_INTERVALS", "RunKind", "sweep_is_overdue", "sweep_overdue_after"]

OVERDUE_INTERVALS = 3  # sweep intervals that may pass with no completed sweep
OVERDUE_GRACE_SECONDS = 60  # seconds on top: a long sweep, a busy queue, a restarting worker


class RunKind(StrEnum):
    """The per-tenant runs whose completion is recorded."""

    SCAN = "scan"
    SWEEP = "sweep"
    DIGEST = "digest"


def sweep_overdue_after(sweep_interval_seconds: int) -> timedelta:
    """How long a tenant may go without a completed sweep before it counts as overdue."""
    return timedelta(seconds=OVERDUE_INTERVALS * sweep_interval_seconds + OVERDUE_GRACE_SECONDS)


def sweep_is_overdue(last_sweep: datetime | None, tenant_created: datetime, now: datetime,
                     sweep_interval_seconds: int) -> bool:
    """A tenant never swept is judged from its creation: a new tenant is not alarming
    before its first sweep could have run; one created long ago and never swept is."""
    since = last_sweep if last_sweep is not None else tenant_created
    return now - since > sweep_overdue_after(sweep_interval_seconds)
