"""The states of a ledger claim (notification_ledger.status).

A claim is written claimed (or skipped, when its window had passed before anyone saw it)
and leaves claimed at most once: skipped when a digest found nothing left to list,
cancelled when what it announced stopped holding (a renewal, a moved due date). Whether
it was delivered or acknowledged is kept in timestamps, not in this status.
"""

from __future__ import annotations

from enum import StrEnum

from domain.state_machine import StateMachine

__all__ = ["CLAIM", "ClaimStatus"]


class ClaimStatus(StrEnum):
    CLAIMED = "claimed"  # to be notified, once
    SKIPPED = "skipped"  # recorded, never sent (its window passed, or nothing was left to send)
    CANCELLED = "cancelled"  # no longer true before it was delivered, with a stated reason


CLAIM = StateMachine.of("claim", {
    ClaimStatus.CLAIMED: {ClaimStatus.SKIPPED, ClaimStatus.CANCELLED},
    ClaimStatus.SKIPPED: set(),
    ClaimStatus.CANCELLED: set(),
})
