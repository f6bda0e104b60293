"""Provider events (SES through SNS): what they change, and the replay guard.

An event names its delivery by the message tags we sent (tenant, delivery). It is kept
as received in delivery_events, moves the delivery forward along the state machine, and a
hard bounce or a complaint puts the address on the tenant's suppression list.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import psycopg

from db.delivery.digests import mark_digest_items_delivered
from db.platform.pool import connection
from db.platform.tenancy import TenantTx, tenant_tx
from domain.delivery.sns_messages import SEEN_RETENTION
from domain.delivery.states import DELIVERY, PROVIDER_EVENT_TARGETS, PROVIDER_MAY_HOLD, provider_event_move

__all__ = [
    "PRUNE_BATCH",
    "ProviderEvent",
    "Replayed",
    "apply_event",
    "confirm_subscription_once",
    "record_notification",
]

PRUNE_BATCH = 100  # seen message ids removed per insert at most: pruning never stalls a hook call

# The guard of each provider event's move, from the domain's DELIVERY machine: the statuses
# it may move from among those in which the provider may hold our message. An event that
# moves nothing (a delivery delay, a type we do not know) matches no row.
_EVENT_MOVES = {event_type: DELIVERY.where(to=target, within=PROVIDER_MAY_HOLD, alias="d")
                for event_type, target in PROVIDER_EVENT_TARGETS.items()}


@dataclass(frozen=True)
class ProviderEvent:
    delivery_id: int
    event_type: str  # send, delivery, bounce, complaint, reject, delivery_delay
    provider_message_id: str
    occurred_at: datetime
    permanent_bounce: bool  # a bounce that will recur: suppress the address
    detail: str | None


class Replayed(Exception):
    """This SNS message id was accepted before."""


def _remember(conn: psycopg.Connection[tuple[object, ...]], message_id: str, topic_arn: str) -> None:
    # Ids older than the retention are refused by their timestamp already; each insert
    # removes a bounded batch of them, so the table stays as large as an hour's traffic.
    conn.execute(
        "DELETE FROM control.sns_messages WHERE message_id IN ("
        " SELECT message_id FROM control.sns_messages WHERE received_at < now() - %s"
        " ORDER BY received_at LIMIT %s FOR UPDATE SKIP LOCKED)",
        [SEEN_RETENTION, PRUNE_BATCH],
    )
    row = conn.execute(
        "INSERT INTO control.sns_messages (message_id, topic_arn) VALUES (%s, %s) "
        "ON CONFLICT DO NOTHING RETURNING 1",
        [message_id, topic_arn],
    ).fetchone()
    if row is None:
        raise Replayed(message_id)


def confirm_subscription_once(
    message_id: str, topic_arn: str, token: str, visit: Callable[[], None]
) -> None:
    """Confirm a subscription once: the message id and the token are recorded in the
    transaction that visits the SubscribeURL (so a failed visit records nothing), and a
    replay of either raises Replayed before any request is made."""
    token_hash = hashlib.sha256(token.encode()).hexdigest()
    with connection() as conn, conn.transaction():
        _remember(conn, message_id, topic_arn)
        row = conn.execute(
            "INSERT INTO control.sns_subscriptions (token_sha256, topic_arn, message_id) "
            "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
            [token_hash, topic_arn, message_id],
        ).fetchone()
        if row is None:
            raise Replayed(message_id)
        visit()


def record_notification(
    message_id: str, topic_arn: str, tenant: str | None, event: ProviderEvent | None
) -> str | None:
    """Accept one SNS message, once: its id is remembered in the same transaction as its
    effect, so a replay (Replayed) changes nothing and a failure leaves it retryable.
    Returns the delivery's status after the event, or None when it names no delivery."""
    if tenant is None or event is None:
        with connection() as conn, conn.transaction():
            _remember(conn, message_id, topic_arn)
        return None
    with tenant_tx(tenant) as tx:
        _remember(tx.conn, message_id, topic_arn)
        return apply_event(tx, event)


def apply_event(tx: TenantTx, event: ProviderEvent) -> str | None:
    """Record the event and move its delivery; the delivery's new status, or None when the
    delivery is unknown to this tenant."""
    move = provider_event_move(event.event_type)  # the domain's table is the one source
    target = None if move is None else move[0].value
    sources = [] if move is None else sorted(s.value for s in move[1])
    row = tx.conn.execute(
        f"""
        WITH delivery AS (
            SELECT d.id, d.notification_id, u.email
            FROM notification_deliveries d
            LEFT JOIN notifications n ON n.id = d.notification_id
            LEFT JOIN digests g ON g.id = d.digest_id
            JOIN users u ON u.id = coalesce(n.recipient_user_id, g.user_id)
            WHERE d.id = %(id)s AND d.channel = 'email' FOR UPDATE OF d
        ), recorded AS (
            INSERT INTO delivery_events (delivery_id, event_type, provider_message_id, detail, occurred_at)
            SELECT id, %(type)s, %(message_id)s, %(detail)s, %(at)s FROM delivery
        ), moved AS (
            UPDATE notification_deliveries d
            SET status = %(target)s, updated_at = now(), lease_until = NULL, unknown_since = NULL,
                provider_message_id = coalesce(d.provider_message_id, %(message_id)s),
                accepted_at = coalesce(d.accepted_at, now())
            FROM delivery x
            WHERE d.id = x.id AND %(target)s::text IS NOT NULL
              AND {_EVENT_MOVES.get(event.event_type, "false")}
            RETURNING d.id, d.notification_id
        ), attempt AS (
            UPDATE delivery_attempts a
            SET ended_at = now(), outcome = 'accepted', provider_message_id = %(message_id)s
            FROM moved m
            WHERE a.delivery_id = m.id AND a.ended_at IS NULL AND %(type)s <> 'reject'
        ), ledger AS (
            UPDATE notification_ledger l SET delivered_at = coalesce(l.delivered_at, now())
            FROM notifications n, moved m
            WHERE n.id = m.notification_id AND l.id = n.ledger_id AND %(type)s IN ('send', 'delivery')
        ), suppressed AS (
            INSERT INTO suppressed_addresses (email, reason, source_delivery_id)
            SELECT lower(email), CASE WHEN %(type)s = 'complaint' THEN 'complaint' ELSE 'bounce' END, id
            FROM delivery
            WHERE %(type)s = 'complaint' OR (%(type)s = 'bounce' AND %(permanent)s)
            ON CONFLICT (email) DO NOTHING
        )
        SELECT d.status, d.digest_id FROM notification_deliveries d JOIN delivery x ON x.id = d.id
        """,
        {"id": event.delivery_id, "type": event.event_type, "message_id": event.provider_message_id,
         "detail": event.detail, "at": event.occurred_at, "target": target,
         "permanent": event.permanent_bounce},
    ).fetchone()
    if row is None:
        return None
    moved = target is not None and str(row[0]) in sources
    if moved and row[1] is not None and event.event_type in ("send", "delivery"):
        mark_digest_items_delivered(tx, int(str(row[1])))
    # The final SELECT reads the snapshot from before the CTEs; the status is the target
    # when the move applied, else unchanged.
    return target if moved and target is not None else str(row[0])
