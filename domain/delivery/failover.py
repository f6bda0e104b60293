"""Email failover: when SES fails in a way the tenant chose, the email goes through SMTP.

A tenant picks the classes of SES failure that switch one email to SMTP (its administrators
know whether their SMTP relay may carry their mail, and at what cost):
  - sending paused: SES refuses every send of the account or configuration set until a
    person acts, so waiting is pointless;
  - throttled for longer than N minutes: SES keeps saying "slow down" past the tenant's
    patience;
  - a run of 5xx: SES answered server errors to the last K calls in a row.
The email keeps its Message-ID, so a copy that SES did take after all is recognisably the
same message, and the attempt records both providers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from domain.delivery.states import THROTTLING_CODES
from domain.errors import InvalidInput

__all__ = [
    "MAX_RUN_OF_5XX",
    "MAX_THROTTLED_MINUTES",
    "PAUSED_CODES",
    "FailoverPolicy",
    "SesFailure",
    "SesRun",
    "failover_reason",
    "next_run",
]

# SES error codes that mean the account or its configuration set may not send at all.
PAUSED_CODES = frozenset({"SendingPausedException", "AccountSendingPausedException"})
MAX_THROTTLED_MINUTES = 24 * 60  # minutes: a longer patience is no failover at all
MAX_RUN_OF_5XX = 100  # SES answers in a row


@dataclass(frozen=True)
class FailoverPolicy:
    """The tenant's choice; all off (the default) means SES only."""

    on_paused: bool = False
    on_throttled: bool = False
    throttled_minutes: int = 15  # minutes of throttling before the switch
    on_5xx: bool = False
    run_of_5xx: int = 3  # 5xx answers in a row before the switch

    def __post_init__(self) -> None:
        if not 0 <= self.throttled_minutes <= MAX_THROTTLED_MINUTES:
            raise InvalidInput(f"throttling patience must be 0 to {MAX_THROTTLED_MINUTES} minutes")
        if not 1 <= self.run_of_5xx <= MAX_RUN_OF_5XX:
            raise InvalidInput(f"a run of 5xx must be 1 to {MAX_RUN_OF_5XX} answers")

    @property
    def enabled(self) -> bool:
        return self.on_paused or self.on_throttled or self.on_5xx


@dataclass(frozen=True)
class SesFailure:
    """One SES error answer: its code and HTTP status (None when no answer came)."""

    code: str | None
    http_status: int | None

    @property
    def paused(self) -> bool:
        return self.code in PAUSED_CODES

    @property
    def throttled(self) -> bool:
        return self.code in THROTTLING_CODES or self.http_status == 429

    @property
    def server_error(self) -> bool:
        return self.http_status is not None and self.http_status >= 500


@dataclass(frozen=True)
class SesRun:
    """The tenant's current streak of SES failures (kept in PostgreSQL, shared by every
    worker): 5xx answers in a row, and since when SES has been throttling without a break."""

    server_errors: int = 0
    throttled_since: datetime | None = None


def next_run(run: SesRun, failure: SesFailure, now: datetime) -> SesRun:
    """The streak after one more failure: a 5xx extends the run of 5xx, throttling starts
    (or continues) the throttled period; any other failure ends both."""
    return SesRun(
        run.server_errors + 1 if failure.server_error else 0,
        (run.throttled_since or now) if failure.throttled else None,
    )


def failover_reason(policy: FailoverPolicy, failure: SesFailure, run: SesRun,
                    now: datetime) -> str | None:
    """Why this email goes through SMTP now (for the attempt's record), or None to keep
    the SES outcome. ``run`` already counts ``failure`` (``next_run``)."""
    if policy.on_paused and failure.paused:
        return f"SES sending paused ({failure.code})"
    if policy.on_throttled and failure.throttled and run.throttled_since is not None:
        waited = now - run.throttled_since
        if waited >= timedelta(minutes=policy.throttled_minutes):
            return f"SES throttling for {int(waited.total_seconds() // 60)} min " \
                   f"(patience {policy.throttled_minutes} min)"
    if policy.on_5xx and failure.server_error and run.server_errors >= policy.run_of_5xx:
        return f"SES answered {run.server_errors} server error(s) in a row " \
               f"(last HTTP {failure.http_status})"
    return None
