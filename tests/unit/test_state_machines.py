"""The status machines of domain/ and the SQL guards they render."""

from __future__ import annotations

import pytest

from domain.delivery.states import DELIVERY, NOT_SENT, WAITING, Status
from domain.events.states import EVENT, EventStatus
from domain.notices.claims import CLAIM, ClaimStatus
from domain.notices.licence import LICENCE, LicenceStatus
from domain.state_machine import IllegalMove, StateMachine

LIGHT = StateMachine.of("light", {"red": {"green"}, "green": {"amber"}, "amber": {"red"}})


def test_a_guard_names_the_statuses_a_move_may_start_from() -> None:
    assert DELIVERY.where(to="accepted") == "status IN ('sending', 'unknown')"
    assert DELIVERY.where(to=Status.ACCEPTED, alias="d") == "d.status IN ('sending', 'unknown')"


def test_a_guard_of_several_targets_keeps_the_statuses_that_may_reach_each_of_them() -> None:
    assert DELIVERY.where(to=(Status.FAILED, Status.PENDING)) == "status IN ('sending', 'unknown')"


def test_a_guard_from_named_statuses_refuses_one_that_may_not_make_the_move() -> None:
    assert DELIVERY.where(to=Status.CANCELLED, from_=NOT_SENT) == \
        "status IN ('batched', 'deferred', 'pending')"
    with pytest.raises(IllegalMove, match="cannot move from pending to accepted"):
        DELIVERY.where(to=Status.ACCEPTED, from_=[Status.PENDING])


def test_a_guard_within_statuses_keeps_only_those_allowed() -> None:
    assert DELIVERY.where(to=Status.BATCHED, within=WAITING) == "status IN ('deferred', 'pending')"
    with pytest.raises(IllegalMove, match="no state may move to accepted"):
        DELIVERY.where(to=Status.ACCEPTED, within=WAITING)


def test_a_guard_refuses_unknown_states_and_a_move_nothing_may_make() -> None:
    with pytest.raises(IllegalMove, match="no state 'acepted'"):
        DELIVERY.where(to="acepted")
    with pytest.raises(IllegalMove, match="no state may move to created"):
        StateMachine.of("once", {"created": set()}).where(to="created")
    with pytest.raises(ValueError, match="not a table alias"):
        LIGHT.where(to="red", alias="x; DROP TABLE users")


def test_a_machine_refuses_moves_to_undeclared_states_and_words_unsafe_in_sql() -> None:
    with pytest.raises(IllegalMove, match="undeclared states"):
        StateMachine.of("broken", {"a": {"b"}})
    with pytest.raises(ValueError, match="plain lower-case word"):
        StateMachine.of("quoted", {"it's": set()})


@pytest.mark.parametrize(("source", "target", "allowed"), [
    (ClaimStatus.CLAIMED, ClaimStatus.CANCELLED, True),  # a renewal, a moved due date
    (ClaimStatus.CLAIMED, ClaimStatus.SKIPPED, True),  # a digest with nothing left to list
    (ClaimStatus.CANCELLED, ClaimStatus.CLAIMED, False),  # a cancelled notice never comes back
    (ClaimStatus.SKIPPED, ClaimStatus.CANCELLED, False),
])
def test_a_ledger_claim_leaves_claimed_at_most_once(
    source: ClaimStatus, target: ClaimStatus, allowed: bool
) -> None:
    assert ((source, target) in CLAIM.moves) is allowed


@pytest.mark.parametrize(("source", "target", "allowed"), [
    (EventStatus.PENDING, EventStatus.PROCESSING, True),  # claimed by the relay
    (EventStatus.PROCESSING, EventStatus.PROCESSING, True),  # its lease ran out: claimed again
    (EventStatus.PROCESSING, EventStatus.EVALUATED, True),
    (EventStatus.PROCESSING, EventStatus.PENDING, True),  # a failed batch handed back
    (EventStatus.PENDING, EventStatus.FAILED, True),  # claimed too often without an evaluation
    (EventStatus.PENDING, EventStatus.EVALUATED, False),  # evaluated only under a claim
    (EventStatus.EVALUATED, EventStatus.PROCESSING, False),  # evaluated once
    (EventStatus.FAILED, EventStatus.PENDING, False),
])
def test_an_event_is_evaluated_only_under_a_claim_and_only_once(
    source: EventStatus, target: EventStatus, allowed: bool
) -> None:
    assert ((source, target) in EVENT.moves) is allowed


@pytest.mark.parametrize(("source", "target", "allowed"), [
    (LicenceStatus.ACTIVE, LicenceStatus.EXPIRED, True),  # the scan, at the expiry date
    (LicenceStatus.EXPIRED, LicenceStatus.CLOSED, True),  # the scan, after the grace days
    (LicenceStatus.EXPIRED, LicenceStatus.ACTIVE, True),  # renewed in the grace days
    (LicenceStatus.CLOSED, LicenceStatus.ACTIVE, True),  # reactivated by an administrator
    (LicenceStatus.ACTIVE, LicenceStatus.ACTIVE, True),  # renewed early: a later date
    (LicenceStatus.ACTIVE, LicenceStatus.CLOSED, False),  # closed only after the grace days
    (LicenceStatus.CLOSED, LicenceStatus.EXPIRED, False),
])
def test_a_licence_expires_then_closes_and_any_licence_may_be_renewed(
    source: LicenceStatus, target: LicenceStatus, allowed: bool
) -> None:
    assert ((source, target) in LICENCE.moves) is allowed


def test_every_status_column_has_its_own_machine_name_and_every_status_of_its_enum() -> None:
    machines = {DELIVERY: Status, CLAIM: ClaimStatus, EVENT: EventStatus, LICENCE: LicenceStatus}
    assert len({m.name for m in machines}) == len(machines)
    for machine, states in machines.items():
        assert machine.states == {s.value for s in states}
