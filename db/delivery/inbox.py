"""A user's inbox: the feed (newest first, keyset-paginated), the unread badge, writing a
notification into it, and what its reader does with one: read, unread, archive, mark all
read, and acknowledge ("I have seen this") in the ledger.

Every action names the reader: another user's notification is indistinguishable from a
missing one."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from db.platform.effects import AnnounceInbox
from db.platform.tenancy import TenantTx
from domain.errors import InvalidInput, NotFound

__all__ = [
    "PAGE_SIZE",
    "Cursor",
    "InboxItem",
    "acknowledge",
    "add_to_inbox",
    "archive",
    "inbox_page",
    "mark_all_read",
    "mark_read",
    "mark_unread",
    "newer_items",
    "unread_count",
]

PAGE_SIZE = 20  # notifications per page of the feed


@dataclass(frozen=True)
class InboxItem:
    id: int
    category: str
    title: str
    body: str
    data: dict[str, Any]
    created_at: datetime
    read_at: datetime | None
    archived: bool = False
    ledger_id: int | None = None  # the claim this notice is about, if any
    acknowledged_at: datetime | None = None  # when someone said "I have seen this" in the ledger

    @property
    def unread(self) -> bool:
        return self.read_at is None

    @property
    def can_acknowledge(self) -> bool:
        return self.ledger_id is not None and self.acknowledged_at is None


_ITEM_COLUMNS = "id, category, title, body, data, created_at, read_at, archived_at, ledger_id"
# Reads of items: the row plus its claim's acknowledgement, from a CTE named `items`.
_SELECT_ITEMS = """
SELECT i.id, i.category, i.title, i.body, i.data, i.created_at, i.read_at, i.archived_at,
       i.ledger_id, l.acknowledged_at
FROM items i LEFT JOIN notification_ledger l ON l.id = i.ledger_id
"""


def _item(row: tuple[object, ...]) -> InboxItem:
    data, created_at, read_at, acknowledged_at = row[4], row[5], row[6], row[9]
    assert isinstance(data, dict) and isinstance(created_at, datetime)
    assert read_at is None or isinstance(read_at, datetime)
    assert acknowledged_at is None or isinstance(acknowledged_at, datetime)
    return InboxItem(
        int(str(row[0])), str(row[1]), str(row[2]), str(row[3]), data, created_at, read_at,
        archived=row[7] is not None, ledger_id=None if row[8] is None else int(str(row[8])),
        acknowledged_at=acknowledged_at,
    )


@dataclass(frozen=True)
class Cursor:
    """Keyset position: the (created_at, id) of the last item shown."""

    created_at: datetime
    id: int


def inbox_page(
    tx: TenantTx, user_id: int, after: Cursor | None = None, limit: int = PAGE_SIZE
) -> tuple[list[InboxItem], Cursor | None]:
    """One page of unarchived notifications, newest first, and the cursor of the next page.
    Served by the (recipient_user_id, created_at desc, id desc) index."""
    rows = _items_beside(tx, user_id, after, older=True, limit=limit + 1)
    items = [_item(row) for row in rows[:limit]]
    next_cursor = Cursor(items[-1].created_at, items[-1].id) if len(rows) > limit else None
    return items, next_cursor


def _items_beside(
    tx: TenantTx, user_id: int, cursor: Cursor | None, *, older: bool, limit: int
) -> list[tuple[object, ...]]:
    """Up to ``limit`` unarchived rows on one side of ``cursor`` (older: the next page; newer:
    the oldest of those that arrived since), returned newest first either way. Served by the
    (recipient_user_id, created_at desc, id desc) index, read forwards or backwards."""
    params: dict[str, object] = {"user": user_id, "limit": limit}
    keyset = ""
    if cursor is not None:
        keyset = f"AND (created_at, id) {'<' if older else '>'} (%(created_at)s, %(id)s)"
        params |= {"created_at": cursor.created_at, "id": cursor.id}
    order = "created_at DESC, id DESC" if older else "created_at, id"
    return tx.conn.execute(
        f"""
        WITH items AS (
            SELECT {_ITEM_COLUMNS}
            FROM notifications
            WHERE recipient_user_id = %(user)s AND archived_at IS NULL {keyset}
            ORDER BY {order}
            LIMIT %(limit)s
        )
        {_SELECT_ITEMS}
        ORDER BY i.created_at DESC, i.id DESC
        """,
        params,
    ).fetchall()


def unread_count(tx: TenantTx, user_id: int) -> int:
    """The badge; served by the partial index on unread, unarchived rows."""
    row = tx.conn.execute(
        "SELECT count(*) FROM notifications "
        "WHERE recipient_user_id = %s AND read_at IS NULL AND archived_at IS NULL",
        [user_id],
    ).fetchone()
    assert row is not None
    return int(str(row[0]))


def add_to_inbox(
    tx: TenantTx,
    recipient_user_id: int,
    category: str,
    title: str,
    body: str,
    data: dict[str, Any] | None = None,
    *,
    idempotency_key: str,
) -> InboxItem | None:
    """Put one notification in a user's inbox. A repeated idempotency key writes nothing and
    returns None, so a retried producer never shows the same notice twice."""
    try:
        with tx.conn.transaction():  # a savepoint: a rejected row leaves the caller's tx usable
            row = tx.conn.execute(
                f"""
                INSERT INTO notifications
                    (recipient_user_id, category, title, body, data, idempotency_key)
                VALUES (%s, %s, %s, %s, %s, %s)
                ON CONFLICT (idempotency_key) DO NOTHING
                RETURNING {_ITEM_COLUMNS}, NULL
                """,
                [recipient_user_id, category, title, body, Jsonb(data or {}), idempotency_key],
            ).fetchone()
    except psycopg.errors.CheckViolation:
        raise InvalidInput(f"unknown notification category {category!r}") from None
    except psycopg.errors.ForeignKeyViolation:
        raise NotFound(f"no user with id {recipient_user_id} in tenant {tx.tenant.slug!r}") from None
    if row is None:
        return None
    item = _item(row)
    tx.after_commit(AnnounceInbox({recipient_user_id}))
    return item


def newer_items(tx: TenantTx, user_id: int, than: Cursor | None, limit: int = PAGE_SIZE) -> list[InboxItem]:
    """Unarchived notifications after the newest one a page shows, newest first: the oldest
    ``limit`` of them, so a page far behind catches up over a few refreshes without gaps.
    Served by the (recipient_user_id, created_at desc, id desc) index, read backwards."""
    return [_item(row) for row in _items_beside(tx, user_id, than, older=False, limit=limit)]


def _change(tx: TenantTx, user_id: int, notification_id: int, assignments: str) -> InboxItem:
    row = tx.conn.execute(
        f"""
        WITH items AS (
            UPDATE notifications SET {assignments}
            WHERE id = %(id)s AND recipient_user_id = %(user)s
            RETURNING {_ITEM_COLUMNS}
        )
        {_SELECT_ITEMS}
        """,
        {"id": notification_id, "user": user_id},
    ).fetchone()
    if row is None:
        raise NotFound(f"no notification {notification_id} in this inbox")
    return _item(row)


# Reading is not acknowledging: the ledger's acknowledged_at/by records an explicit
# "I have seen this", never a click that may have been a slip.
def mark_read(tx: TenantTx, user_id: int, notification_id: int) -> InboxItem:
    """Mark one of the user's own notifications read (again is harmless: the first read time
    stays)."""
    return _change(tx, user_id, notification_id, "read_at = coalesce(read_at, now())")


def mark_unread(tx: TenantTx, user_id: int, notification_id: int) -> InboxItem:
    return _change(tx, user_id, notification_id, "read_at = NULL")


def archive(tx: TenantTx, user_id: int, notification_id: int) -> InboxItem:
    """Take a notification out of the feed (and the badge); the row and its evidence stay."""
    return _change(tx, user_id, notification_id, "archived_at = coalesce(archived_at, now())")


def mark_all_read(tx: TenantTx, user_id: int) -> int:
    """Mark every unread, unarchived notification of the user read; how many changed.
    Walks the badge's partial index."""
    cursor = tx.conn.execute(
        "UPDATE notifications SET read_at = now() "
        "WHERE recipient_user_id = %s AND read_at IS NULL AND archived_at IS NULL",
        [user_id],
    )
    return cursor.rowcount


def acknowledge(tx: TenantTx, user_id: int, notification_id: int) -> InboxItem:
    """Record in the ledger that this reader has seen the notice ("I have seen this"): who
    and when, once per claim; the first acknowledgement stands. Also marks it read."""
    item = mark_read(tx, user_id, notification_id)
    if item.ledger_id is None:
        raise InvalidInput("this notice is not a tracked compliance notice, so it needs no acknowledgement")
    row = tx.conn.execute(
        "UPDATE notification_ledger SET acknowledged_at = now(), acknowledged_by = %s "
        "WHERE id = %s AND acknowledged_at IS NULL RETURNING acknowledged_at",
        [user_id, item.ledger_id],
    ).fetchone()
    if row is None:  # acknowledged before: the first acknowledgement stands
        return item
    assert isinstance(row[0], datetime)
    return replace(item, acknowledged_at=row[0])
