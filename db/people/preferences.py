"""Preferences over Postgres: set-based resolution, the send-time check, and the edits made
by the preference centre, the tenant admin page and the unsubscribe link.

The resolution rule itself is domain.delivery.preferences.resolve; RESOLVED_COLUMNS is its SQL twin
(used where many pairs are resolved in one statement, e.g. at prepare time) and a test
checks the two agree on every combination.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, time

from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx
from domain.delivery.preferences import (
    CATEGORIES,
    PRODUCT_DEFAULT,
    Channel,
    Frequency,
    Preference,
    Resolved,
    SendCheck,
    Source,
    email_decision,
    valid_category,
    valid_lock_reason,
)
from domain.delivery.quiet_hours import DeliverySchedule, QuietHours, quiet_hours_end
from domain.delivery.states import DELIVERY, WAITING, Status
from domain.errors import InvalidInput, NotFound

__all__ = [
    "PRODUCT_PARAMS",
    "RESOLVED_COLUMNS",
    "CategoryDefault",
    "CategoryLocked",
    "CategoryPreference",
    "Unsubscribed",
    "apply_send_check",
    "category_defaults",
    "delivery_schedule",
    "delivery_schedules",
    "email_send_checks",
    "preference_matrix",
    "release_due_deferrals",
    "resolve_preference",
    "resolve_preferences",
    "save_category_default",
    "save_schedule",
    "save_user_preference",
    "set_channel",
    "unsubscribe_email",
]

# Needs `up` (notification_preferences, the user's row or NULLs) and `td` (category_defaults,
# the category's row or NULLs) joined, and the PRODUCT_PARAMS parameters.
RESOLVED_COLUMNS = """
    CASE WHEN td.locked THEN td.in_app WHEN up.user_id IS NOT NULL THEN up.in_app
         WHEN td.category IS NOT NULL THEN td.in_app ELSE %(product_in_app)s END AS in_app,
    CASE WHEN td.locked THEN td.email WHEN up.user_id IS NOT NULL THEN up.email
         WHEN td.category IS NOT NULL THEN td.email ELSE %(product_email)s END AS email,
    CASE WHEN td.locked THEN td.frequency WHEN up.user_id IS NOT NULL THEN up.frequency
         WHEN td.category IS NOT NULL THEN td.frequency ELSE %(product_frequency)s END AS frequency,
    CASE WHEN td.locked THEN 'locked' WHEN up.user_id IS NOT NULL THEN 'user'
         WHEN td.category IS NOT NULL THEN 'tenant' ELSE 'product' END AS source,
    coalesce(td.locked, false) AS locked,
    CASE WHEN td.locked THEN td.lock_reason END AS lock_reason,
    coalesce(td.critical, false) AS critical
"""
PRODUCT_PARAMS: dict[str, object] = {
    "product_in_app": PRODUCT_DEFAULT.in_app,
    "product_email": PRODUCT_DEFAULT.email,
    "product_frequency": PRODUCT_DEFAULT.frequency.value,
}


def _resolved(row: tuple[object, ...]) -> Resolved:
    """From the seven RESOLVED_COLUMNS, in order."""
    in_app, email, frequency, source, locked, reason, critical = row
    return Resolved(
        Preference(bool(in_app), bool(email), Frequency(str(frequency))), Source(str(source)),
        bool(locked), None if reason is None else str(reason), bool(critical),
    )


def resolve_preferences(tx: TenantTx, pairs: list[tuple[int, str]]) -> dict[tuple[int, str], Resolved]:
    """The preference of every (user, category) pair, in one statement."""
    if not pairs:
        return {}
    for category in {c for _, c in pairs}:
        valid_category(category)
    # Two comma-joined strings, split in Postgres: adapting 100,000-element Python lists
    # cost more than the query itself.
    rows = tx.conn.execute(
        f"""
        SELECT p.user_id, p.category, {RESOLVED_COLUMNS}
        FROM unnest(string_to_array(%(users)s, ',')::bigint[],
                    string_to_array(%(categories)s, ',')) AS p(user_id, category)
        LEFT JOIN notification_preferences up ON up.user_id = p.user_id AND up.category = p.category
        LEFT JOIN category_defaults td ON td.category = p.category
        """,
        {"users": ",".join(str(int(u)) for u, _ in pairs), "categories": ",".join(c for _, c in pairs),
         **PRODUCT_PARAMS},
    ).fetchall()
    # Few distinct answers exist (channels x frequency x source x lock): build each once.
    seen: dict[tuple[object, ...], Resolved] = {}
    out = {}
    for row in rows:
        key = row[2:]
        resolved = seen.get(key)
        if resolved is None:
            resolved = seen[key] = _resolved(key)
        out[(int(row[0]), str(row[1]))] = resolved  # type: ignore[call-overload]
    return out


def resolve_preference(tx: TenantTx, user_id: int, category: str) -> Resolved:
    """One pair's preference (the preference centre, the send-time check)."""
    row = tx.conn.execute(
        f"""
        SELECT {RESOLVED_COLUMNS}
        FROM (SELECT %(user)s::bigint AS user_id, %(category)s::text AS category) p
        LEFT JOIN notification_preferences up ON up.user_id = p.user_id AND up.category = p.category
        LEFT JOIN category_defaults td ON td.category = p.category
        """,
        {"user": user_id, "category": category, **PRODUCT_PARAMS},
    ).fetchone()
    assert row is not None
    return _resolved(row)


def delivery_schedule(tx: TenantTx, user_id: int) -> DeliverySchedule:
    return delivery_schedules(tx, [user_id]).get(user_id, DeliverySchedule(tx.tenant.time_zone))


def delivery_schedules(tx: TenantTx, user_ids: list[int]) -> dict[int, DeliverySchedule]:
    """Each existing user's delivery schedule, in one statement."""
    rows = tx.conn.execute(
        """
        SELECT u.id, coalesce(u.time_zone, %s), s.quiet_start, s.quiet_end,
               coalesce(s.digest_time, '08:00'), coalesce(s.weekly_day, 1)
        FROM users u LEFT JOIN delivery_schedules s ON s.user_id = u.id
        WHERE u.id = ANY(%s)
        """,
        [tx.tenant.time_zone, sorted(set(user_ids))],
    ).fetchall()
    schedules = {}
    for user_id, zone, start, end, digest_time, weekly_day in rows:
        quiet = QuietHours(start, end) if isinstance(start, time) and isinstance(end, time) else None
        assert isinstance(digest_time, time)
        schedules[int(str(user_id))] = DeliverySchedule(str(zone), quiet, digest_time,
                                                        int(str(weekly_day)))
    return schedules


def email_send_checks(
    tx: TenantTx, keys: list[tuple[int, str, bool]], now: datetime
) -> dict[tuple[int, str, bool], SendCheck]:
    """What to do with each (user, category, critical) email right now, in two statements:
    send, cancel(reason), defer(until) or batch(period). Called at send time so a change
    made after the claim (an opt-out, new quiet hours, a switch to digests) is honoured.
    ``critical``: the notice itself is critical (a tenant's rule said so), as if its
    category were."""
    if not keys:
        return {}
    resolved = resolve_preferences(tx, sorted({(user_id, valid_category(c)) for user_id, c, _ in keys}))
    schedules = delivery_schedules(tx, [user_id for user_id, _, _ in keys])
    checks = {}
    for user_id, category, critical in keys:
        schedule = schedules.get(user_id, DeliverySchedule(tx.tenant.time_zone))
        preference = resolved[(user_id, category)]
        if critical and not preference.critical:
            preference = replace(preference, critical=True)
        checks[(user_id, category, critical)] = email_decision(
            preference, quiet_hours_end(now, schedule.zone, schedule.quiet))
    return checks


# The guard of each move a send check makes, from the domain's DELIVERY machine: a waiting
# delivery, or a sending one this claim holds (its token).
_SEND_CHECK_MOVES = {
    target: f"({DELIVERY.where(to=target, within=WAITING)} OR "
            f"({DELIVERY.where(to=target, from_=[Status.SENDING])} AND claim_token = %(token)s::uuid))"
    for target in (Status.CANCELLED, Status.DEFERRED, Status.BATCHED)
}
_DEFERRAL_OVER = DELIVERY.where(to=Status.PENDING, from_=[Status.DEFERRED])


def apply_send_check(tx: TenantTx, delivery_id: int, check: SendCheck, claim_token: object = None) -> bool:
    """Move a pending or deferred (or, with its claim token, a sending) email delivery to what the check
    says; SEND changes nothing. False if the row was not in a state we may move."""
    if check.action.value == "send":
        return True
    status, reason, send_after, period = {
        "cancel": ("cancelled", check.reason, None, None),
        "defer": ("deferred", None, check.until, None),
        "batch": ("batched", None, None, check.period),
    }[check.action.value]
    row = tx.conn.execute(
        f"""
        UPDATE notification_deliveries
        SET status = %(status)s, status_reason = %(reason)s::text,
            send_after = coalesce(%(send_after)s::timestamptz, send_after),
            batch_period = %(period)s::text,
            batched_at = CASE WHEN %(period)s::text IS NULL THEN NULL ELSE now() END,
            lease_until = NULL, enqueued_at = NULL, updated_at = now()
        WHERE id = %(id)s AND notification_id IS NOT NULL AND {_SEND_CHECK_MOVES[Status(status)]}
        RETURNING id
        """,
        {"status": status, "reason": reason, "send_after": send_after, "period": period,
         "id": delivery_id, "token": claim_token},
    ).fetchone()
    return row is not None


def release_due_deferrals(tx: TenantTx, now: datetime, limit: int = 10_000) -> list[int]:
    """Deferred emails whose quiet hours are over become pending (due at once, not yet
    enqueued), so the usual enqueue-and-send path takes them. Guarded: each row is released
    by one transaction only."""
    rows = tx.conn.execute(
        f"""
        UPDATE notification_deliveries SET status = 'pending', send_after = least(send_after, now()),
               enqueued_at = NULL, updated_at = now()
        WHERE id IN (
            SELECT id FROM notification_deliveries
            WHERE status = 'deferred' AND send_after <= %s
            ORDER BY send_after, id LIMIT %s FOR UPDATE SKIP LOCKED
        ) AND {_DEFERRAL_OVER}
        RETURNING id
        """,
        [now, limit],
    ).fetchall()
    return sorted(int(str(r[0])) for r in rows)


# ---- the preference centre -------------------------------------------------------------


@dataclass(frozen=True)
class CategoryPreference:
    category: str
    resolved: Resolved


def preference_matrix(tx: TenantTx, user_id: int) -> list[CategoryPreference]:
    resolved = resolve_preferences(tx, [(user_id, c) for c in CATEGORIES])
    return [CategoryPreference(c, resolved[(user_id, c)]) for c in CATEGORIES]


def _save_user_preference(tx: TenantTx, user_id: int, category: str, preference: Preference) -> None:
    tx.conn.execute(
        """
        INSERT INTO notification_preferences (user_id, category, in_app, email, frequency)
        VALUES (%s, %s, %s, %s, %s)
        ON CONFLICT (user_id, category) DO UPDATE
        SET in_app = excluded.in_app, email = excluded.email, frequency = excluded.frequency,
            updated_at = now()
        """,
        [user_id, category, preference.in_app, preference.email, preference.frequency.value],
    )
    record_audit(tx, "preference.save", "user", user_id,
                 after={"category": category, "in_app": preference.in_app,
                        "email": preference.email, "frequency": preference.frequency})


class CategoryLocked(InvalidInput):
    """The tenant locked this category; members cannot change it."""


def _unlocked(tx: TenantTx, user_id: int, category: str) -> Resolved:
    resolved = resolve_preference(tx, user_id, valid_category(category))
    if resolved.locked:
        raise CategoryLocked(f"your organisation requires this notification: {resolved.lock_reason}")
    # Lock the user's row (or its absence) against a concurrent toggle of another field.
    tx.conn.execute("SELECT 1 FROM users WHERE id = %s FOR UPDATE", [user_id])
    return resolve_preference(tx, user_id, category)


def save_user_preference(tx: TenantTx, user_id: int, category: str, preference: Preference) -> Preference:
    """The preference centre's save of one category row (channels and frequency at once)."""
    _unlocked(tx, user_id, category)
    _save_user_preference(tx, user_id, category, preference)
    return preference


def set_channel(tx: TenantTx, user_id: int, category: str, channel: Channel, on: bool) -> Preference:
    current = _unlocked(tx, user_id, category).preference
    updated = Preference(
        on if channel is Channel.IN_APP else current.in_app,
        on if channel is Channel.EMAIL else current.email,
        current.frequency,
    )
    _save_user_preference(tx, user_id, category, updated)
    return updated


@dataclass(frozen=True)
class Unsubscribed:
    changed: bool  # False: it was off already
    locked_reason: str | None  # set when the category is locked: nothing changed


def unsubscribe_email(tx: TenantTx, user_id: int, category: str) -> Unsubscribed:
    """The one-click unsubscribe: this category's email channel off for this user, unless
    the tenant locked the category. NotFound for a user this tenant does not have."""
    if tx.conn.execute("SELECT 1 FROM users WHERE id = %s", [user_id]).fetchone() is None:
        raise NotFound("that account no longer exists")
    resolved = resolve_preference(tx, user_id, valid_category(category))
    if resolved.locked:
        return Unsubscribed(False, resolved.lock_reason)
    if not resolved.preference.email:
        return Unsubscribed(False, None)
    set_channel(tx, user_id, category, Channel.EMAIL, False)
    return Unsubscribed(True, None)


def save_schedule(
    tx: TenantTx, user_id: int, *, quiet: QuietHours | None, digest_time: time, weekly_day: int,
    zone: str,
) -> None:
    tx.conn.execute(
        """
        INSERT INTO delivery_schedules (user_id, quiet_start, quiet_end, digest_time, weekly_day)
        VALUES (%s, %s, %s, %s, %s)
        ON CONFLICT (user_id) DO UPDATE
        SET quiet_start = excluded.quiet_start, quiet_end = excluded.quiet_end,
            digest_time = excluded.digest_time, weekly_day = excluded.weekly_day, updated_at = now()
        """,
        [user_id, quiet.start if quiet else None, quiet.end if quiet else None, digest_time, weekly_day],
    )
    tx.conn.execute("UPDATE users SET time_zone = %s WHERE id = %s", [zone, user_id])
    record_audit(tx, "preference.schedule", "user", user_id,
                 after={"quiet_start": quiet.start if quiet else None,
                        "quiet_end": quiet.end if quiet else None, "digest_time": digest_time,
                        "weekly_day": weekly_day, "time_zone": zone})


# ---- tenant defaults ---------------------------------------------------------------------


@dataclass(frozen=True)
class CategoryDefault:
    category: str
    preference: Preference
    locked: bool
    lock_reason: str | None
    critical: bool
    customised: bool  # False: the product default applies


def category_defaults(tx: TenantTx) -> list[CategoryDefault]:
    rows = tx.conn.execute(
        "SELECT category, in_app, email, frequency, locked, lock_reason, critical FROM category_defaults"
    ).fetchall()
    stored = {str(r[0]): r for r in rows}
    out = []
    for category in CATEGORIES:
        r = stored.get(category)
        if r is None:
            out.append(CategoryDefault(category, PRODUCT_DEFAULT, False, None, False, False))
            continue
        out.append(CategoryDefault(
            category, Preference(bool(r[1]), bool(r[2]), Frequency(str(r[3]))), bool(r[4]),
            None if r[5] is None else str(r[5]), bool(r[6]), True,
        ))
    return out


def save_category_default(
    tx: TenantTx, category: str, preference: Preference, *, locked: bool, lock_reason: str | None,
    critical: bool, by_user_id: int,
) -> None:
    reason = valid_lock_reason(locked, lock_reason)
    tx.conn.execute(
        """
        INSERT INTO category_defaults
            (category, in_app, email, frequency, locked, lock_reason, critical, updated_by)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (category) DO UPDATE
        SET in_app = excluded.in_app, email = excluded.email, frequency = excluded.frequency,
            locked = excluded.locked, lock_reason = excluded.lock_reason,
            critical = excluded.critical, updated_by = excluded.updated_by, updated_at = now()
        """,
        [valid_category(category), preference.in_app, preference.email, preference.frequency.value,
         locked, reason, critical, by_user_id],
    )
    record_audit(tx, "settings.category_default", "category", category,
                 after={"in_app": preference.in_app, "email": preference.email,
                        "frequency": preference.frequency, "locked": locked,
                        "lock_reason": reason, "critical": critical})
