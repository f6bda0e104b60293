"""The evidence chain's background work: sealing written facts into each tenant's chain
shortly after they commit, and verifying each chain periodically (db/evidence/)."""

from __future__ import annotations

import logging

import dramatiq

from db.evidence.chain import seal_tenant
from db.evidence.checkpoints import checkpoint_and_keep
from db.evidence.verifications import verify_and_record
from db.platform.tenancy import list_tenants
from tocsin.core import runtime
from tocsin.core.settings import ConfigError
from tocsin.messaging.priority import BACKGROUND

__all__ = ["seal_evidence", "seal_tick", "verify_evidence", "verify_tick"]

log = logging.getLogger("tocsin.evidence")


@dramatiq.actor(queue_name="sweep", time_limit=5 * 60_000, max_age=60_000,  # milliseconds
                priority=BACKGROUND)
def seal_evidence(slug: str) -> None:
    sealed = seal_tenant(slug)
    if sealed:
        log.debug("sealed tenant=%s facts=%d", slug, sealed)


@dramatiq.actor(queue_name="sweep", time_limit=60_000, max_age=60_000, priority=BACKGROUND)  # ms
def seal_tick() -> None:
    """One seal per active tenant (a sealer that runs twice finds nothing the second time)."""
    for tenant in list_tenants(active_only=True):
        seal_evidence.send(tenant.slug)


@dramatiq.actor(queue_name="sweep", time_limit=30 * 60_000, max_age=30 * 60_000,  # milliseconds
                priority=BACKGROUND)
def verify_evidence(slug: str) -> None:
    report, run = verify_and_record(slug)
    if not report.ok:
        log.error("evidence of tenant=%s is broken (%d break(s)); first: %s%s", slug, len(report.breaks),
                  run.first_break, " (ops alerted)" if run.alerted else "")
        return
    log.info("verified tenant=%s records=%d head=%d in %.2fs", slug, run.records, run.head_seq,
             run.seconds)
    try:  # a checkpoint signs only a chain that verified
        checkpoint, copy = checkpoint_and_keep(slug, "periodic", runtime.settings())
    except ConfigError as error:  # a secret that may not sign here: verified, not signed
        log.warning("no checkpoint for tenant=%s: %s", slug, error)
        return
    log.info("checkpoint tenant=%s seq=%d key=%s%s", slug, checkpoint.seq, checkpoint.key_id,
             f" written to {copy}" if copy else "")


@dramatiq.actor(queue_name="sweep", time_limit=60_000, max_age=10 * 60_000, priority=BACKGROUND)  # ms
def verify_tick() -> None:
    for tenant in list_tenants(active_only=True):
        verify_evidence.send(tenant.slug)
