"""Idempotency records of the events API: the first answer to a (key, Idempotency-Key) is
stored in the transaction that recorded its events and replayed for the same request; a
different request under the same Idempotency-Key is refused. Kept as long as the events.

A concurrent duplicate needs no lock of ours: its INSERT meets the first request's row in
the primary key and waits for that transaction. If the first commits, the duplicate reads
its answer and replays it; if it rolls back, the duplicate goes ahead as the first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from db.platform.tenancy import TenantTx
from domain.events.intake import IdempotencyKeyReused

__all__ = ["Answer", "answer_once"]


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]
    replayed: bool = False


def answer_once(tx: TenantTx, api_key_id: int, idempotency_key: str | None, request_hash: str,
                answer: Callable[[], Answer]) -> Answer:
    """``answer()`` run once per Idempotency-Key, in ``tx``; a repeat of the same request
    gets the stored answer (replayed), another request under the key IdempotencyKeyReused."""
    if idempotency_key is None:
        return answer()
    claimed = tx.conn.execute(
        "INSERT INTO api_idempotency (api_key_id, idempotency_key, request_hash, response_status, "
        "response_body) VALUES (%s, %s, %s, 0, '{}') ON CONFLICT DO NOTHING RETURNING 1",
        [api_key_id, idempotency_key, request_hash]).fetchone()
    if claimed is None:
        row = tx.conn.execute(
            "SELECT request_hash, response_status, response_body FROM api_idempotency "
            "WHERE api_key_id = %s AND idempotency_key = %s", [api_key_id, idempotency_key]).fetchone()
        assert row is not None  # the conflicting row committed: we waited for it
        if row[0] != request_hash:
            raise IdempotencyKeyReused(
                f"Idempotency-Key {idempotency_key[:80]!r} was used for a different request: "
                "use a new key for a new request")
        body = row[2]
        assert isinstance(body, dict)
        return Answer(int(str(row[1])), body, replayed=True)
    result = answer()
    tx.conn.execute(
        "UPDATE api_idempotency SET response_status = %s, response_body = %s "
        "WHERE api_key_id = %s AND idempotency_key = %s",
        [result.status, Jsonb(result.body), api_key_id, idempotency_key])
    return result
