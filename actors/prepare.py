"""prepare_notices: turn a tenant's rule claims into inbox rows and email deliveries.

Thin: one tenant transaction around db/rule_notices.py prepare_rule_claims; the emails and
the live-inbox push go out once it has committed (db/tenancy.py). When it fails, that
transaction has rolled back and is poisoned, so the failure is recorded in a fresh one
(record_preparation_failure) and the error re-raised for Dramatiq's bounded retry. A claim
that failed PREPARE_MAX_ATTEMPTS times is skipped from then on and listed on the
Needs-attention page. Safe to run twice: a prepared claim is skipped, notices are keyed
by (claim, recipient).

Messages go to the product's own queue (domain/preparation_queues.py), so a backlog or a
poison message in one product never stalls another's; send them with send_preparation.
"""

from __future__ import annotations

import logging

import dramatiq

from db.rule_notices import PreparationFailed, prepare_rule_claims, record_preparation_failure
from db.tenancy import TenantTx, tenant_tx
from domain.preparation_queues import preparation_queue
from tocsin import runtime

log = logging.getLogger("tocsin.prepare")

MAX_RETRIES = 4  # Dramatiq retries after the first run; PREPARE_MAX_ATTEMPTS bounds each claim


# Declared on the shared queue (the literal is SHARED_QUEUE: tests/integration/
# test_worker_registry.py reads it from the source); send_preparation picks the product's.
@dramatiq.actor(queue_name="prepare_other", max_retries=MAX_RETRIES, min_backoff=1_000,  # milliseconds
                max_backoff=30_000, time_limit=2 * 60_000)  # milliseconds
def prepare_notices(slug: str, ledger_ids: list[int]) -> None:
    ids = [int(i) for i in ledger_ids]
    try:
        with tenant_tx(slug) as tx:
            report = prepare_rule_claims(tx, ids)
    except PreparationFailed as failure:
        _record(slug, failure.ledger_id, failure.reason)
        raise
    log.info("prepared tenant=%s claims=%d skipped=%d notices=%d emails=%d", slug,
             len(report.prepared), len(report.skipped), report.notices, len(report.emails))


def _record(slug: str, ledger_id: int, reason: str) -> None:
    recorded = record_preparation_failure(slug, ledger_id, reason,
                                          max_attempts=runtime.settings().prepare_max_attempts)
    if recorded is None:
        return
    log.warning("preparation failed tenant=%s ledger=%d attempt=%d%s: %s", slug, ledger_id,
                recorded.attempts, " (giving up: shown on Needs attention)" if recorded.gave_up else "",
                reason)


def send_committed_claims(tx: TenantTx) -> None:
    """After-commit listener (db/tenancy.py on_commit): the rule claims a committed
    transaction collected in tx.claims_to_prepare, one message per product."""
    by_product: dict[str, list[int]] = {}
    for product, ledger_id in tx.claims_to_prepare:
        by_product.setdefault(product, []).append(ledger_id)
    for product, ledger_ids in sorted(by_product.items()):
        send_preparation(tx.tenant.slug, product, ledger_ids)


def send_preparation(slug: str, product: str, ledger_ids: list[int]) -> None:
    """Enqueue the preparation of these claims of one product on that product's queue."""
    queue = preparation_queue(product, runtime.settings().product_queues)
    message = prepare_notices.message(slug, sorted(ledger_ids)).copy(queue_name=queue)
    prepare_notices.broker.enqueue(message)
