"""The evidence chain's background work: sealing written facts into each tenant's chain
shortly after they commit, verifying each chain periodically (db/evidence/), and emailing
each signed checkpoint to the organisation's compliance address."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from email.utils import parseaddr

import dramatiq

from db.evidence.chain import seal_tenant
from db.evidence.checkpoint_emails import (
    claim_checkpoint_email,
    open_checkpoint_emails,
    record_checkpoint_email,
)
from db.evidence.checkpoints import checkpoint_and_keep
from db.evidence.retention import apply_retention
from db.evidence.verifications import verify_and_record
from db.platform.tenancy import list_tenants, tenant_tx
from domain.delivery.states import ErrorClass
from domain.evidence.checkpoint_email import checkpoint_email, checkpoint_message_id
from tocsin.core import runtime
from tocsin.core.settings import ConfigError
from tocsin.messaging.priority import BACKGROUND
from tocsin.providers.ses import OutgoingEmail, ProviderError, get_mailer

__all__ = [
    "RETENTION_EVERY_SECONDS", "email_checkpoint", "retain_evidence", "retention_tick", "seal_evidence",
    "seal_tick", "send_checkpoint_emails", "verify_evidence", "verify_tick",
]

RETENTION_EVERY_SECONDS = 24 * 3600  # the clock's retention pass: daily (db/evidence/retention.py)

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


@dramatiq.actor(queue_name="email", time_limit=60_000, max_age=60 * 60_000)  # milliseconds
def email_checkpoint(slug: str, checkpoint_id: int) -> None:
    """Send one checkpoint's copy to the compliance address, once: only the run whose claim
    takes the row calls the provider; the answer is recorded (sent, or the error)."""
    with tenant_tx(slug) as tx:
        claimed = claim_checkpoint_email(tx, checkpoint_id)
    if claimed is None:
        return
    settings = runtime.settings()
    domain = parseaddr(settings.mail_from)[1].rpartition("@")[2] or "tocsin.invalid"
    subject, text = checkpoint_email(claimed.tenant_name, claimed.checkpoint)
    outgoing = OutgoingEmail(checkpoint_message_id(slug, checkpoint_id, domain), claimed.address, subject,
                             text, {"tenant": slug, "checkpoint": str(checkpoint_id)})
    try:
        accepted = get_mailer().send(outgoing)
    except ProviderError as error:
        with tenant_tx(slug) as tx:
            record_checkpoint_email(tx, checkpoint_id, error=f"{error.error_class}: {error}",
                                    retry=error.error_class is not ErrorClass.PERMANENT)
        log.warning("checkpoint email tenant=%s checkpoint=%d failed: %s", slug, checkpoint_id,
                    error.error_class)
        return
    with tenant_tx(slug) as tx:
        record_checkpoint_email(tx, checkpoint_id, provider_message_id=accepted.provider_message_id)
    log.info("checkpoint email tenant=%s checkpoint=%d sent", slug, checkpoint_id)


def send_checkpoint_emails(slug: str, checkpoint_ids: Iterable[int]) -> None:
    """Hand committed checkpoint emails to the email workers."""
    for checkpoint_id in checkpoint_ids:
        email_checkpoint.send(slug, checkpoint_id)


@dramatiq.actor(queue_name="sweep", time_limit=30 * 60_000, max_age=30 * 60_000,  # milliseconds
                priority=BACKGROUND)
def verify_evidence(slug: str) -> None:
    with tenant_tx(slug) as tx:  # emails a lost wake-up or a dead sender left behind
        send_checkpoint_emails(slug, open_checkpoint_emails(tx))
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


@dramatiq.actor(queue_name="sweep", time_limit=60 * 60_000, max_age=60 * 60_000,  # milliseconds
                priority=BACKGROUND)
def retain_evidence(slug: str) -> None:
    """Blank the message bodies and addresses older than the tenant's retention (safe to run
    twice: a blanked row is not blanked again)."""
    done = apply_retention(slug)
    if done.rows:
        log.info("retention tenant=%s days=%s blanked %s", slug, done.retention_days, done.blanked)


@dramatiq.actor(queue_name="sweep", time_limit=60_000, max_age=60 * 60_000, priority=BACKGROUND)  # ms
def retention_tick() -> None:
    tenants = list_tenants(active_only=True)
    for tenant in tenants:
        retain_evidence.send(tenant.slug)
    log.info("retention pass sent to %d tenant(s)", len(tenants))
