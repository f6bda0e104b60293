"""The states of an event in the outbox (events.status), from its commit to its evaluation.

The relay claims pending events under a lease (processing); a claim whose lease ran out is
claimed again by the next pass (processing to processing, a new token). An evaluation ends
the claim evaluated, or failed with the error; a failed batch is handed back pending; an
event claimed too often without an evaluation is failed from either waiting state.
"""

from __future__ import annotations

from enum import StrEnum

from domain.state_machine import StateMachine

__all__ = ["EVENT", "EventStatus"]


class EventStatus(StrEnum):
    PENDING = "pending"  # committed, waiting for the relay
    PROCESSING = "processing"  # claimed by one relay pass until lease_until
    EVALUATED = "evaluated"  # its rules ran; their claims are in the ledger
    FAILED = "failed"  # given up, with the error: shown to ops, never dropped


EVENT = StateMachine.of("event", {
    EventStatus.PENDING: {EventStatus.PROCESSING, EventStatus.FAILED},
    EventStatus.PROCESSING: {
        EventStatus.PROCESSING, EventStatus.EVALUATED, EventStatus.PENDING, EventStatus.FAILED,
    },
    EventStatus.EVALUATED: set(),
    EventStatus.FAILED: set(),
})
