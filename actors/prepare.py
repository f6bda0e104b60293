"""prepare_notices: turn a tenant's rule claims into inbox rows and email deliveries.

Thin: one tenant transaction around db/notices/rule_notices.py prepare_rule_claims; the emails and
the live-inbox push go out once it has committed (db/platform/tenancy.py). When it fails, that
transaction has rolled back and is poisoned, so the failure is recorded in a fresh one
(record_preparation_failure), the rest of the message is prepared without it, and the first
error re-raised for Dramatiq's bounded retry. A claim
that failed PREPARE_MAX_ATTEMPTS times is skipped from then on and listed on the
Needs-attention page. Safe to run twice: a prepared claim is skipped, notices are keyed
by (claim, recipient).

Messages go to the product's own queue (domain/delivery/preparation_queues.py), so a backlog or a
poison message in one product never stalls another's; send them with send_preparation.

The relay hands over the claims of a batch it has just evaluated with prepare_or_send: a
product whose queue is idle has its few claims prepared there and then, in a transaction of
their own, by the evaluating worker (no queue hop, no second message); a backlog, a product
whose preparation failed here lately, or a broker whose queues cannot be looked at cheaply
(RabbitMQ) takes the queue. A failure here is recorded like the actor's and the claims go to
the queue, which retries them within bounds; the sweeper re-sends claims left unprepared by
a worker that died in between.
"""

from __future__ import annotations

import logging
import threading
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from db.notices.rule_notices import PreparationFailed, prepare_rule_claims, record_preparation_failure
from db.platform.tenancy import tenant_tx
from domain.delivery.preparation_queues import preparation_queue
from tocsin.core import runtime
from tocsin.messaging.queues import RedisQueueDepths

__all__ = [
    "INLINE_MAX_CLAIMS",
    "MAX_RETRIES",
    "prepare_notices",
    "prepare_or_send",
    "send_claims",
    "send_preparation",
]

log = logging.getLogger("tocsin.prepare")

MAX_RETRIES = 4  # Dramatiq retries after the first run; PREPARE_MAX_ATTEMPTS bounds each claim
# Claims of one product the evaluating worker prepares itself; more is a backlog, and a
# backlog is prepared from the product's queue, beside the other products' work.
INLINE_MAX_CLAIMS = 20
# After a preparation of a tenant's product failed in the evaluating worker, that product's
# claims take the queue (retried there with backoff) for PREPARE_INLINE_PAUSE_SECONDS: a
# poison product costs the relay one failed attempt per pause, not one per batch.


# Declared on the shared queue (the literal is SHARED_QUEUE: tests/integration/
# test_worker_registry.py reads it from the source); send_preparation picks the product's.
# Its backoff comes with each message (PREPARE_BACKOFF_MIN/MAX_SECONDS, see send_preparation).
@dramatiq.actor(queue_name="prepare_other", max_retries=MAX_RETRIES,
                time_limit=2 * 60_000)  # milliseconds
def prepare_notices(slug: str, ledger_ids: list[int]) -> None:
    remaining = sorted({int(i) for i in ledger_ids})
    failed: PreparationFailed | None = None
    # A claim that fails is recorded and left out, and the rest of the message is prepared in
    # a new transaction at once: a poison claim costs its batch one rolled-back try, and each
    # run of the message counts one attempt for every claim that fails, not for the first only.
    while remaining:
        try:
            with tenant_tx(slug, generic_plans=True) as tx:
                report = prepare_rule_claims(tx, remaining)
        except PreparationFailed as failure:
            _record(slug, failure.ledger_id, failure.reason)
            failed = failed or failure
            remaining = [i for i in remaining if i != failure.ledger_id]
            continue
        log.info("prepared tenant=%s claims=%d skipped=%d notices=%d emails=%d", slug,
                 len(report.prepared), len(report.skipped), report.notices, len(report.emails))
        break
    if failed is not None:
        raise failed  # Dramatiq retries the message: claims prepared since are skipped then


def _record(slug: str, ledger_id: int, reason: str) -> None:
    recorded = record_preparation_failure(slug, ledger_id, reason,
                                          max_attempts=runtime.settings().prepare_max_attempts)
    if recorded is None:
        return
    log.warning("preparation failed tenant=%s ledger=%d attempt=%d%s: %s", slug, ledger_id,
                recorded.attempts, " (giving up: shown on Needs attention)" if recorded.gave_up else "",
                reason)


def send_claims(slug: str, claims: list[tuple[str, int]]) -> None:
    """The rule claims a committed transaction made (the PrepareClaims effect, wired by
    tocsin/boot/effects.py), one message per product."""
    by_product: dict[str, list[int]] = {}
    for product, ledger_id in claims:
        by_product.setdefault(product, []).append(ledger_id)
    for product, ledger_ids in sorted(by_product.items()):
        send_preparation(slug, product, ledger_ids)


def send_preparation(slug: str, product: str, ledger_ids: list[int]) -> None:
    """Enqueue the preparation of these claims of one product on that product's queue."""
    settings = runtime.settings()
    queue = preparation_queue(product, settings.product_queues)
    message = prepare_notices.message_with_options(
        args=(slug, sorted(ledger_ids)),
        min_backoff=round(settings.prepare_backoff_min_seconds * 1000),  # milliseconds
        max_backoff=round(settings.prepare_backoff_max_seconds * 1000),  # milliseconds
    ).copy(queue_name=queue)
    prepare_notices.broker.enqueue(message)


_inline_lock = threading.Lock()
_inline_paused: dict[tuple[str, str], float] = {}  # (tenant, product) -> paused until (monotonic)


def prepare_or_send(slug: str, claims: list[tuple[str, int]]) -> None:
    """The claims of a committed evaluation, (product, ledger id): prepared here, at once,
    when their product's queue is idle and they are few; else sent to that queue."""
    by_product: dict[str, list[int]] = {}
    for product, ledger_id in claims:
        by_product.setdefault(product, []).append(ledger_id)
    for product, ledger_ids in sorted(by_product.items()):
        if not (len(ledger_ids) <= INLINE_MAX_CLAIMS and _inline_allowed(slug, product)
                and _queue_idle(preparation_queue(product, runtime.settings().product_queues))):
            send_preparation(slug, product, ledger_ids)
            continue
        try:
            with tenant_tx(slug, generic_plans=True) as tx:
                report = prepare_rule_claims(tx, sorted(ledger_ids))
        except Exception as error:
            with _inline_lock:
                _inline_paused[(slug, product)] = (
                    time.monotonic() + runtime.settings().prepare_inline_pause_seconds)
            if isinstance(error, PreparationFailed):
                _record(slug, error.ledger_id, error.reason)
            else:
                log.warning("preparation failed tenant=%s product=%s: %s: %s", slug, product,
                            type(error).__name__, error)
            send_preparation(slug, product, ledger_ids)  # retried there, within bounds
            continue
        log.debug("prepared at once tenant=%s claims=%d notices=%d emails=%d", slug,
                  len(report.prepared), report.notices, len(report.emails))


def _inline_allowed(slug: str, product: str) -> bool:
    with _inline_lock:
        until = _inline_paused.get((slug, product))
        if until is not None and time.monotonic() >= until:
            del _inline_paused[(slug, product)]
            until = None
    return until is None


def _queue_idle(queue: str) -> bool:
    """Nothing waits in the queue (a backlog is prepared in order, from the queue). Only the
    Redis broker is asked; on another broker the queue is always the way."""
    broker = prepare_notices.broker
    if not isinstance(broker, RedisBroker):
        return False
    return RedisQueueDepths(broker.client, broker.namespace).waiting(queue) == 0
