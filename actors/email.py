"""deliver_email: claim (committed), send through the provider, record (fenced)."""

from __future__ import annotations

import logging
import random
from datetime import UTC, datetime
from email.utils import parseaddr

import dramatiq

from actors.ses import OutgoingEmail, ProviderError, get_mailer
from db.deliveries import ClaimedEmail, claim_delivery, record_accepted, record_failure
from db.tenancy import tenant_tx
from domain.delivery import email_message_id, email_text, retry_delay, should_retry
from tocsin.config import load_settings

# Ids, attempts and outcomes only: never addresses or message bodies.
log = logging.getLogger("tocsin.email")


@dramatiq.actor(queue_name="email", time_limit=2 * 60_000)  # milliseconds
def deliver_email(slug: str, delivery_id: int) -> None:
    """Safe to run any number of times: only the run whose UPDATE moves the delivery from
    pending to sending calls the provider; the others find nothing to do."""
    settings = load_settings()
    with tenant_tx(slug) as tx:
        claim = claim_delivery(tx, delivery_id, settings.delivery_lease_seconds)
    if claim is None:
        return
    if not claim.recipient_active:
        with tenant_tx(slug) as tx:
            record_failure(
                tx, claim, outcome="cancelled", error_class="ineligible",
                error="recipient deactivated before the send", retry_at=None,
            )
        return
    sender_domain = parseaddr(settings.mail_from)[1].rpartition("@")[2] or "tocsin.invalid"
    link = f"{settings.portal_url}{claim.href}" if claim.href else None
    email = OutgoingEmail(
        message_id=email_message_id(slug, claim.delivery_id, sender_domain),
        to=claim.recipient,
        subject=claim.title,
        text=email_text(claim.body, link),
        tags={"tenant": slug, "delivery": str(claim.delivery_id)},
    )
    try:
        accepted = get_mailer().send(email)
    except ProviderError as error:
        _record_error(slug, claim, error)
        return
    with tenant_tx(slug) as tx:
        recorded = record_accepted(tx, claim, accepted.provider_message_id, accepted.request_id)
    log.info("delivery tenant=%s id=%d attempt=%d accepted request=%s%s", slug, claim.delivery_id,
             claim.attempt, accepted.request_id, "" if recorded else " (lease lost: not recorded)")


def _record_error(slug: str, claim: ClaimedEmail, error: ProviderError) -> None:
    retry_at = None
    if should_retry(error.error_class, claim.attempt):
        retry_at = datetime.now(UTC) + retry_delay(claim.attempt, random.random())
    log.warning("delivery tenant=%s id=%d attempt=%d %s error: %s; %s", slug, claim.delivery_id,
                claim.attempt, error.error_class.value, error,
                f"retry after {retry_at:%H:%M:%S}Z" if retry_at else "failed for good")
    with tenant_tx(slug) as tx:
        record_failure(
            tx, claim, outcome="failed", error_class=error.error_class.value, error=str(error),
            retry_at=retry_at, request_id=error.request_id,
        )
