"""The annual licence cadence as windows over calendar dates.

Every milestone has a window ``[starts, ends)`` of local calendar dates measured from the
client's ``access_expires_on``. A milestone is *due* while the client's local today is
inside its window, so a missed scan heals on the next one; once a later window has begun
the earlier milestone is *skipped* (recorded, never sent late). Windows are whole days,
which is why a daylight-saving change can never make one fire twice.

A client's licence status moves along LICENCE: the scan expires and closes it, a renewal
makes it active again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from enum import StrEnum

from domain.errors import TocsinError
from domain.messages import N_
from domain.people.identity import Plan
from domain.state_machine import StateMachine

__all__ = [
    "CADENCE",
    "CATEGORY",
    "COPY",
    "GRACE_DAYS",
    "LICENCE",
    "RENEWAL_OPENS_AT",
    "RENEWAL_WINDOW_DAYS",
    "RENEWED",
    "RULE",
    "SUBJECT_KIND",
    "LicenceStatus",
    "Milestone",
    "Outcome",
    "RenewalRefused",
    "Stage",
    "Window",
    "WindowRow",
    "cadence_for",
    "check_client_renewal",
    "milestone_outcomes",
    "renewal_opens_on",
    "window_table",
    "windows_for",
]

RULE = "licence"  # the ledger's rule name for every milestone of this cadence
RENEWED = "renewed"  # the ledger threshold of the renewal notice; its due_on is the new expiry
SUBJECT_KIND = "client"
CATEGORY = "license_expiring"
GRACE_DAYS = 14  # days after expiry until the account closes (data kept, reactivation possible)


class Stage(StrEnum):
    """Which licence status a milestone speaks to."""

    REMINDER = "reminder"  # before expiry: sent while the client is active
    EXPIRY = "expiry"  # the guarded active -> expired transition
    GRACE = "grace"  # after expiry: sent while the client is expired
    CLOSE = "close"  # the guarded expired -> closed transition


class Outcome(StrEnum):
    DUE = "due"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Milestone:
    threshold: str
    offset_days: int  # days relative to access_expires_on at which the window opens
    stage: Stage
    enterprise_only: bool = False


CADENCE: tuple[Milestone, ...] = (
    Milestone("d90", -90, Stage.REMINDER, enterprise_only=True),
    Milestone("d60", -60, Stage.REMINDER, enterprise_only=True),
    Milestone("d30", -30, Stage.REMINDER),
    Milestone("d14", -14, Stage.REMINDER),
    Milestone("d7", -7, Stage.REMINDER),
    Milestone("d1", -1, Stage.REMINDER),
    Milestone("expiry", 0, Stage.EXPIRY),
    Milestone("grace1", 1, Stage.GRACE),
    Milestone("grace3", 3, Stage.GRACE),
    Milestone("grace7", 7, Stage.GRACE),
    Milestone("closed", GRACE_DAYS, Stage.CLOSE),
)


class LicenceStatus(StrEnum):
    """A client's licence (clients.status)."""

    ACTIVE = "active"
    EXPIRED = "expired"  # past its expiry date, within the grace days
    CLOSED = "closed"  # past the grace days: data kept, an administrator may reactivate it


# The scan expires and closes; a renewal makes any licence active (an active one stays
# active with a later date; a closed one is reactivated).
LICENCE = StateMachine.of("licence", {
    LicenceStatus.ACTIVE: {LicenceStatus.ACTIVE, LicenceStatus.EXPIRED},
    LicenceStatus.EXPIRED: {LicenceStatus.ACTIVE, LicenceStatus.CLOSED},
    LicenceStatus.CLOSED: {LicenceStatus.ACTIVE},
})

# A client user may renew their own licence from this reminder's window on (or once it has
# expired). Before it, "renew" would only buy a second year while the first still runs; the
# renewal itself moves the expiry a year out, so a second renewal in one cycle is refused too.
RENEWAL_OPENS_AT = "d30"
RENEWAL_WINDOW_DAYS = -next(m.offset_days for m in CADENCE if m.threshold == RENEWAL_OPENS_AT)


class RenewalRefused(TocsinError):
    """A client user asked for a renewal the licence rules do not allow them."""


def renewal_opens_on(expires_on: date) -> date:
    return expires_on - timedelta(days=RENEWAL_WINDOW_DAYS)


def check_client_renewal(status: str, expires_on: date, today: date) -> None:
    """RenewalRefused unless a client user may renew now: never a closed account (only an
    administrator reactivates it), and an active licence only within the renewal window.
    Administrators are not subject to these rules."""
    if status == "closed":
        raise RenewalRefused(
            "this account is closed: only an administrator can reactivate it. Ask your "
            "account manager"
        )
    if status == "active" and today < renewal_opens_on(expires_on):
        raise RenewalRefused(
            f"this licence runs until {expires_on.isoformat()}, and renewal opens "
            f"{RENEWAL_WINDOW_DAYS} days before, on {renewal_opens_on(expires_on).isoformat()}. "
            "Nothing has been changed"
        )


@dataclass(frozen=True)
class Window:
    milestone: Milestone
    starts: int  # offset in days, inclusive
    ends: int | None  # offset in days, exclusive; None for the last milestone

    def contains(self, offset: int) -> bool:
        return self.starts <= offset and (self.ends is None or offset < self.ends)

    def has_passed(self, offset: int) -> bool:
        return self.ends is not None and offset >= self.ends


def cadence_for(plan: Plan) -> tuple[Milestone, ...]:
    return tuple(m for m in CADENCE if plan is Plan.ENTERPRISE or not m.enterprise_only)


def windows_for(plan: Plan) -> tuple[Window, ...]:
    milestones = cadence_for(plan)
    ends: list[int | None] = [m.offset_days for m in milestones[1:]]
    ends.append(None)
    return tuple(Window(m, m.offset_days, end) for m, end in zip(milestones, ends, strict=True))


def milestone_outcomes(
    expires_on: date, plan: Plan, today: date
) -> tuple[tuple[Milestone, Outcome], ...]:
    """Every milestone whose window has begun by ``today``: due if today is inside it,
    skipped if a later window has already begun."""
    offset = (today - expires_on).days
    return tuple(
        (w.milestone, Outcome.SKIPPED if w.has_passed(offset) else Outcome.DUE)
        for w in windows_for(plan)
        if w.starts <= offset
    )


@dataclass(frozen=True)
class WindowRow:
    """A window in the flat form the set-based claim query takes as parameters."""

    threshold: str
    starts: int
    ends: int | None
    enterprise_only: bool
    stage: Stage


def window_table() -> tuple[WindowRow, ...]:
    """All windows of both plans, one row per (threshold, plan-variant).

    d90 and d60 exist only for enterprise; every other window has the same bounds on both
    plans because the milestone after each is shared, so one row per threshold suffices.
    """
    enterprise = {w.milestone.threshold: w for w in windows_for(Plan.ENTERPRISE)}
    standard = {w.milestone.threshold: w for w in windows_for(Plan.STANDARD)}
    rows = []
    for threshold, window in enterprise.items():
        if threshold in standard:
            assert standard[threshold] == window, "windows differ between plans"
        rows.append(
            WindowRow(
                threshold,
                window.starts,
                window.ends,
                window.milestone.enterprise_only,
                window.milestone.stage,
            )
        )
    return tuple(rows)


# What each milestone says. {client} is the client's name and {date} its access expiry
# date, both filled in by the claim that writes the inbox row.
COPY: dict[str, tuple[str, str]] = {
    "d90": (
        N_("{client}: portal access renews in 90 days"),
        N_("Access for {client} runs until {date}. If your organisation needs a purchase order, "
        "now is a good time to start it."),
    ),
    "d60": (
        N_("{client}: portal access renews in 60 days"),
        N_("Access for {client} runs until {date}. Renewing early keeps your compliance "
        "records and reminders uninterrupted."),
    ),
    "d30": (
        N_("{client}: portal access renews in 30 days"),
        N_("Access for {client} runs until {date}. Renew now to keep every reminder and record "
        "in place."),
    ),
    "d14": (
        N_("{client}: two weeks until access renews"),
        N_("Access for {client} ends on {date}. Renewal takes one click from your portal."),
    ),
    "d7": (
        N_("{client}: one week until access pauses"),
        N_("Access for {client} ends on {date}. Renew now so your team keeps working without a "
        "break."),
    ),
    "d1": (
        N_("{client}: last day before access pauses"),
        N_("Access for {client} ends on {date}. Renew today to avoid the pause."),
    ),
    "expiry": (
        N_("{client}: annual licence expired"),
        N_("Access for {client} lapsed on {date}. Your data is kept; renew in one click to "
        "restore access."),
    ),
    "grace1": (
        N_("{client}: access paused - reactivate in one click"),
        N_("Access for {client} has been paused since {date}. Everything is kept; reactivate "
        "in one click."),
    ),
    "grace3": (
        N_("{client}: your records are waiting"),
        N_("Access for {client} has been paused since {date}. Reactivate to pick up where you "
        "left off."),
    ),
    "grace7": (
        N_("{client}: final reminder before the account closes"),
        N_("Access for {client} has been paused since {date}. The account closes soon; data is "
        "kept and an administrator can still reactivate it."),
    ),
    "closed": (
        N_("{client}: account closed"),
        N_("The account for {client} closed after its grace period (access lapsed on {date}). "
        "Data is kept; an administrator can reactivate it."),
    ),
    RENEWED: (
        N_("{client}: access renewed until {date}"),
        N_("The licence for {client} has been renewed, so access now runs until {date}. Thank "
        "you: every reminder and record carries on as before."),
    ),
}
