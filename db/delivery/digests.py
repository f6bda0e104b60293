"""Digests: one email per (user, period) listing every item batched for it, exactly once.

The claim is a notification_ledger row (rule 'digest', subject the user, threshold 'daily'
or 'weekly', due_on the local period date), so two builders racing produce one digest. An
item joins a digest through a guarded UPDATE (`in_digest_id IS NULL`): it can be taken by
one digest only, and an item committed after the build stays waiting for the next one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time
from zoneinfo import ZoneInfo

from db.people.preferences import PRODUCT_PARAMS, RESOLVED_COLUMNS
from db.platform.tenancy import TenantTx
from domain.delivery.preferences import OPTED_OUT
from domain.delivery.quiet_hours import (
    DeliverySchedule,
    DigestDue,
    QuietHours,
    due_digest,
    next_digest_instant,
)
from domain.delivery.states import DELIVERY, Status
from domain.notices.claims import CLAIM, ClaimStatus

__all__ = [
    "RULE",
    "BuiltDigest",
    "DigestItem",
    "Waiting",
    "build_digest",
    "build_due_digests",
    "digest_email",
    "digest_items",
    "mark_digest_items_delivered",
    "next_digest_at",
    "users_with_waiting_items",
]

RULE = "digest"

# The status guards of the UPDATEs below, from the domain's machines.
_OPTED_OUT_ITEM = DELIVERY.where(to=Status.CANCELLED, from_=[Status.BATCHED])
_SENT_IN_DIGEST = DELIVERY.where(to=Status.DELIVERED, from_=[Status.BATCHED])
_NOTHING_LEFT = CLAIM.where(to=ClaimStatus.SKIPPED)


@dataclass(frozen=True)
class Waiting:
    user_id: int
    period: str
    schedule: DeliverySchedule


def users_with_waiting_items(tx: TenantTx) -> list[Waiting]:
    """Each (user, period) that has batched items not yet in a digest, with the user's clock."""
    rows = tx.conn.execute(
        """
        SELECT w.user_id, w.batch_period, coalesce(u.time_zone, %s), s.quiet_start, s.quiet_end,
               coalesce(s.digest_time, '08:00'), coalesce(s.weekly_day, 1)
        FROM (SELECT DISTINCT n.recipient_user_id AS user_id, d.batch_period
              FROM notification_deliveries d JOIN notifications n ON n.id = d.notification_id
              WHERE d.status = 'batched' AND d.in_digest_id IS NULL) w
        JOIN users u ON u.id = w.user_id
        LEFT JOIN delivery_schedules s ON s.user_id = w.user_id
        ORDER BY w.user_id, w.batch_period
        """,
        [tx.tenant.time_zone],
    ).fetchall()
    out = []
    for user_id, period, zone, start, end, digest_time, weekly_day in rows:
        quiet = QuietHours(start, end) if isinstance(start, time) and isinstance(end, time) else None
        assert isinstance(digest_time, time)
        out.append(Waiting(int(str(user_id)), str(period),
                           DeliverySchedule(str(zone), quiet, digest_time, int(str(weekly_day)))))
    return out


@dataclass(frozen=True)
class BuiltDigest:
    digest_id: int
    user_id: int
    period: str
    items: int
    delivery_id: int  # the digest's email delivery, pending: enqueue it after commit


# Late binding: an item whose recipient has since turned this category's email off is
# cancelled with the reason instead of listed (the inbox row stays).
_CANCEL_OPTED_OUT = f"""
UPDATE notification_deliveries SET status = 'cancelled', status_reason = %(opted_out)s, updated_at = now()
WHERE id IN (
    SELECT d.id
    FROM notification_deliveries d JOIN notifications n ON n.id = d.notification_id
    LEFT JOIN notification_preferences up ON up.user_id = n.recipient_user_id AND up.category = n.category
    LEFT JOIN category_defaults td ON td.category = n.category
    CROSS JOIN LATERAL (SELECT {RESOLVED_COLUMNS}) r
    WHERE d.status = 'batched' AND d.in_digest_id IS NULL AND n.recipient_user_id = %(user)s
      AND NOT (r.email AND r.frequency <> 'off')
) AND {_OPTED_OUT_ITEM} AND in_digest_id IS NULL
"""

_CLAIM = """
WITH waiting AS (
    SELECT d.id FROM notification_deliveries d JOIN notifications n ON n.id = d.notification_id
    WHERE d.status = 'batched' AND d.in_digest_id IS NULL AND d.batch_period = %(period)s
      AND n.recipient_user_id = %(user)s AND d.batched_at < %(cutoff)s
), claim AS (
    INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on, local_date,
                                     prepared_at)
    SELECT %(rule)s, 'user', %(user)s, %(period)s, %(due_on)s, %(local_date)s, now()
    WHERE EXISTS (SELECT 1 FROM waiting)
    ON CONFLICT ON CONSTRAINT notification_once DO NOTHING
    RETURNING id
)
INSERT INTO digests (ledger_id, user_id, period, period_date, cutoff)
SELECT id, %(user)s, %(period)s, %(due_on)s, %(cutoff)s FROM claim
RETURNING id
"""

# Runs after the claim committed its row in this transaction; a concurrent builder of
# another period that took an item first wins it (the recheck of in_digest_id IS NULL).
_TAKE_ITEMS = """
WITH taken AS (
    UPDATE notification_deliveries d SET in_digest_id = %(digest)s, updated_at = now()
    FROM notifications n
    WHERE n.id = d.notification_id AND d.status = 'batched' AND d.in_digest_id IS NULL
      AND d.batch_period = %(period)s AND n.recipient_user_id = %(user)s
      AND d.batched_at < %(cutoff)s
    RETURNING d.id
), counted AS (
    UPDATE digests SET item_count = (SELECT count(*) FROM taken) WHERE id = %(digest)s
)
INSERT INTO notification_deliveries (digest_id, channel)
SELECT %(digest)s, 'email' WHERE EXISTS (SELECT 1 FROM taken)
RETURNING id, (SELECT count(*) FROM taken)
"""


def build_digest(tx: TenantTx, waiting: Waiting, due: DigestDue, as_of: datetime) -> BuiltDigest | None:
    """Claim the digest of ``due``'s period for this user and move its items in, or None if
    it is claimed already (another builder, an earlier tick) or has nothing to list."""
    local_date = as_of.astimezone(ZoneInfo(waiting.schedule.zone)).date()
    params = {"rule": RULE, "user": waiting.user_id, "period": waiting.period, "due_on": due.period_date,
              "local_date": local_date, "cutoff": due.cutoff}
    tx.conn.execute(_CANCEL_OPTED_OUT, {"user": waiting.user_id, "opted_out": OPTED_OUT, **PRODUCT_PARAMS})
    row = tx.conn.execute(_CLAIM, params).fetchone()
    if row is None:
        return None
    digest_id = int(str(row[0]))
    taken = tx.conn.execute(_TAKE_ITEMS, params | {"digest": digest_id}).fetchone()
    if taken is None:  # another period's builder took them all meanwhile: nothing to send
        tx.conn.execute(
            "UPDATE notification_ledger SET status = 'skipped', status_reason = 'no items left' "
            f"WHERE id = (SELECT ledger_id FROM digests WHERE id = %s) AND {_NOTHING_LEFT}",
            [digest_id],
        )
        return None
    return BuiltDigest(digest_id, waiting.user_id, waiting.period, int(str(taken[1])), int(str(taken[0])))


def build_due_digests(tx: TenantTx, as_of: datetime) -> list[BuiltDigest]:
    """Every digest due by ``as_of`` in this tenant. Safe to run at any tick, any number of
    times, concurrently: what is claimed is skipped."""
    built = []
    for waiting in users_with_waiting_items(tx):
        due = due_digest(waiting.period, as_of, waiting.schedule)
        if due is None:
            continue
        digest = build_digest(tx, waiting, due, as_of)
        if digest is not None:
            built.append(digest)
    return built


def next_digest_at(tx: TenantTx, as_of: datetime) -> datetime | None:
    """After the digests due by ``as_of`` were built: the first instant after it at which a
    digest falls due in this tenant (the earliest digest time of a user with items still
    waiting), None when no item waits (nothing falls due before one is batched). For the
    next-work summary (db/platform/next_work.py)."""
    return min((next_digest_instant(w.period, as_of, w.schedule) for w in users_with_waiting_items(tx)),
               default=None)


@dataclass(frozen=True)
class DigestItem:
    title: str
    body: str
    href: str | None
    created_at: datetime


def digest_items(tx: TenantTx, digest_id: int) -> list[DigestItem]:
    rows = tx.conn.execute(
        """
        SELECT n.title, n.body, n.data ->> 'href', n.created_at
        FROM notification_deliveries d JOIN notifications n ON n.id = d.notification_id
        WHERE d.in_digest_id = %s
        ORDER BY d.batched_at, d.id
        """,
        [digest_id],
    ).fetchall()
    return [DigestItem(str(r[0]), str(r[1]), None if r[2] is None else str(r[2]), r[3])  # type: ignore[arg-type]
            for r in rows]


def digest_email(tx: TenantTx, digest_id: int, portal_url: str = "") -> tuple[str, str]:
    """The digest's subject and plain-text body, every item in the order it was batched."""
    row = tx.conn.execute("SELECT period, period_date FROM digests WHERE id = %s", [digest_id]).fetchone()
    if row is None:
        raise LookupError(f"no digest {digest_id}")
    period, period_date = str(row[0]), row[1]
    items = digest_items(tx, digest_id)
    noun = "notification" if len(items) == 1 else "notifications"
    label = "Daily" if period == "daily" else "Weekly"
    subject = f"{label} digest: {len(items)} {noun}"
    lines = [f"{label} digest for {period_date:%d %B %Y}", ""]
    for n, item in enumerate(items, 1):
        lines.append(f"{n}. {item.title}")
        lines.append(f"   {item.body}")
        if item.href:
            lines.append(f"   {portal_url}{item.href}")
        lines.append("")
    lines.append("Change how often you hear from us: " + f"{portal_url}/preferences")
    return subject, "\n".join(lines) + "\n"


def mark_digest_items_delivered(tx: TenantTx, digest_id: int) -> int:
    """Once the digest email is accepted by the provider: its items count as delivered, and
    their ledger rows (and the digest's own) record the delivery. Idempotent."""
    row = tx.conn.execute(
        f"""
        WITH items AS (
            UPDATE notification_deliveries
            SET status = 'delivered', accepted_at = coalesce(accepted_at, now()),
                status_reason = 'sent in digest ' || %(digest)s, updated_at = now()
            WHERE in_digest_id = %(digest)s AND {_SENT_IN_DIGEST}
            RETURNING notification_id
        ), item_ledger AS (
            UPDATE notification_ledger l SET delivered_at = coalesce(l.delivered_at, now())
            FROM notifications n
            WHERE n.id IN (SELECT notification_id FROM items) AND l.id = n.ledger_id
        ), digest_ledger AS (
            UPDATE notification_ledger l SET delivered_at = coalesce(l.delivered_at, now())
            FROM digests g WHERE g.id = %(digest)s AND l.id = g.ledger_id
        )
        SELECT count(*) FROM items
        """,
        {"digest": digest_id},
    ).fetchone()
    assert row is not None
    return int(str(row[0]))
