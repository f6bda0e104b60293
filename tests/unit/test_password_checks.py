"""The per-process budget of password checks: one more than it allows waits, then is told
the portal is busy (503 with Retry-After, mapped in portal.errors)."""

from __future__ import annotations

import threading

import pytest

from domain.errors import Busy
from portal.ratelimit import PasswordChecks


def test_a_check_over_the_budget_waits_then_is_refused_as_busy() -> None:
    checks = PasswordChecks(at_once=1, wait_seconds=0.05)
    with checks.turn(), pytest.raises(Busy) as refused, checks.turn():
        raise AssertionError("two checks ran at once")
    assert not refused.value.own_share and refused.value.retry_after >= 1
    with checks.turn():  # the turn was given back
        pass


def test_a_waiting_check_takes_the_turn_given_back() -> None:
    checks = PasswordChecks(at_once=1, wait_seconds=60)
    holding, ran = threading.Event(), threading.Event()
    release = threading.Event()

    def first() -> None:
        with checks.turn():
            holding.set()
            release.wait(60)

    thread = threading.Thread(target=first)
    thread.start()
    holding.wait(60)

    def second() -> None:
        with checks.turn():
            ran.set()

    waiter = threading.Thread(target=second)
    waiter.start()
    assert not ran.is_set()
    release.set()
    waiter.join(60)
    thread.join(60)
    assert ran.is_set()
