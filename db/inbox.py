"""A user's inbox: the feed (newest first, keyset-paginated) and the unread badge."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from db.tenancy import TenantTx

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

    @property
    def unread(self) -> bool:
        return self.read_at is None


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
    params: dict[str, object] = {"user": user_id, "limit": limit + 1}
    keyset = ""
    if after is not None:
        keyset = "AND (created_at, id) < (%(created_at)s, %(id)s)"
        params |= {"created_at": after.created_at, "id": after.id}
    rows = tx.conn.execute(
        f"""
        SELECT id, category, title, body, data, created_at, read_at
        FROM notifications
        WHERE recipient_user_id = %(user)s AND archived_at IS NULL {keyset}
        ORDER BY created_at DESC, id DESC
        LIMIT %(limit)s
        """,
        params,
    ).fetchall()
    items = [InboxItem(*row) for row in rows[:limit]]  # type: ignore[arg-type]
    next_cursor = Cursor(items[-1].created_at, items[-1].id) if len(rows) > limit else None
    return items, next_cursor


def unread_count(tx: TenantTx, user_id: int) -> int:
    """The badge; served by the partial index on unread, unarchived rows."""
    row = tx.conn.execute(
        "SELECT count(*) FROM notifications "
        "WHERE recipient_user_id = %s AND read_at IS NULL AND archived_at IS NULL",
        [user_id],
    ).fetchone()
    assert row is not None
    return int(str(row[0]))
