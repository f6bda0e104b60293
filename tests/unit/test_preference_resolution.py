"""The resolution table: every combination of tenant default (none, unlocked, locked), user
choice (none or each frequency) and tenant frequency."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from domain.delivery.preferences import (
    PRODUCT_DEFAULT,
    Frequency,
    Preference,
    Resolved,
    SendAction,
    Source,
    TenantDefault,
    email_decision,
    resolve,
    valid_category,
    valid_frequency,
    valid_lock_reason,
)
from domain.errors import InvalidInput

FREQUENCIES = list(Frequency)
# (tenant default state, user has a choice) -> whose preference applies
WINNER = {
    ("none", False): Source.PRODUCT,
    ("none", True): Source.USER,
    ("unlocked", False): Source.TENANT,
    ("unlocked", True): Source.USER,
    ("locked", False): Source.LOCKED,
    ("locked", True): Source.LOCKED,
}
CASES = [
    (state, user_frequency, tenant_frequency, email)
    for state in ("none", "unlocked", "locked")
    for user_frequency in [None, *FREQUENCIES]
    for tenant_frequency in FREQUENCIES
    for email in (True, False)
]


@pytest.mark.parametrize(("state", "user_frequency", "tenant_frequency", "user_email"), CASES)
def test_the_strongest_source_wins_in_every_combination(
    state: str, user_frequency: Frequency | None, tenant_frequency: Frequency, user_email: bool
) -> None:
    user = None if user_frequency is None else Preference(False, user_email, user_frequency)
    tenant_pref = Preference(True, True, tenant_frequency)
    tenant = None if state == "none" else TenantDefault(
        tenant_pref, locked=state == "locked", lock_reason="Required by policy" if state == "locked" else None
    )
    resolved = resolve(user, tenant)
    expected_source = WINNER[(state, user is not None)]
    assert resolved.source is expected_source
    expected = {
        Source.PRODUCT: PRODUCT_DEFAULT, Source.USER: user,
        Source.TENANT: tenant_pref, Source.LOCKED: tenant_pref,
    }[expected_source]
    assert resolved.preference == expected
    assert resolved.locked is (state == "locked")
    assert resolved.lock_reason == ("Required by policy" if state == "locked" else None)


def test_the_product_default_is_in_app_and_instant_email() -> None:
    assert resolve(None, None).preference == Preference(True, True, Frequency.INSTANT)


def test_an_unlocked_default_keeps_no_lock_reason_even_if_one_was_stored() -> None:
    tenant = TenantDefault(Preference(True, True, Frequency.WEEKLY), locked=False, lock_reason="old")
    assert resolve(None, tenant).lock_reason is None


def _resolved(pref: Preference, critical: bool = False) -> Resolved:
    return Resolved(pref, Source.USER, False, None, critical)


QUIET_END = datetime(2027, 1, 1, 6, 0, tzinfo=UTC)


@pytest.mark.parametrize(("pref", "quiet_end", "critical", "action", "detail"), [
    (Preference(True, True, Frequency.INSTANT), None, False, SendAction.SEND, None),
    (Preference(True, True, Frequency.INSTANT), QUIET_END, False, SendAction.DEFER, QUIET_END),
    (Preference(True, True, Frequency.INSTANT), QUIET_END, True, SendAction.SEND, None),
    (Preference(True, True, Frequency.DAILY_DIGEST), QUIET_END, False, SendAction.BATCH, "daily"),
    (Preference(True, True, Frequency.WEEKLY), None, False, SendAction.BATCH, "weekly"),
    (Preference(True, True, Frequency.OFF), None, False, SendAction.CANCEL, None),
    (Preference(True, False, Frequency.INSTANT), QUIET_END, False, SendAction.CANCEL, None),
    (Preference(True, False, Frequency.DAILY_DIGEST), None, True, SendAction.CANCEL, None),
])
def test_the_email_decision_follows_channel_frequency_quiet_hours_and_criticality(
    pref: Preference, quiet_end: datetime | None, critical: bool, action: SendAction, detail: object
) -> None:
    check = email_decision(_resolved(pref, critical), quiet_end)
    assert check.action is action
    if action is SendAction.DEFER:
        assert check.until == detail
    if action is SendAction.BATCH:
        assert check.period == detail
    if action is SendAction.CANCEL:
        assert check.reason


def test_unknown_categories_frequencies_and_reasonless_locks_are_refused() -> None:
    assert valid_category("license_expiring") == "license_expiring"
    assert valid_frequency("weekly") is Frequency.WEEKLY
    for bad in (lambda: valid_category("spam"), lambda: valid_frequency("hourly"),
                lambda: valid_lock_reason(True, "  ")):
        with pytest.raises(InvalidInput):
            bad()
    assert valid_lock_reason(False, "ignored") is None


def test_every_pair_of_frequencies_is_covered() -> None:
    assert len(CASES) == 3 * 5 * 4 * 2
    assert set(itertools.product(FREQUENCIES, FREQUENCIES)) <= {
        (c[1], c[2]) for c in CASES if c[1] is not None
    }
