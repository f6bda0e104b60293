"""deliver_email: check and claim (committed), wait for a send slot, note the call
(committed), send through the provider, record the outcome (fenced by the claim token).

The steps and the in-flight boundary they leave are described in db/deliveries.py.
"""

from __future__ import annotations

import logging
import random
from datetime import UTC, datetime
from email.utils import parseaddr

import dramatiq

from actors.metrics import EMAIL_ATTEMPTS, EMAIL_ERRORS
from actors.rate_limit import RateLimited, get_limiter
from actors.ses import OutgoingEmail, ProviderError, get_mailer
from db.deliveries import (
    ClaimedEmail,
    Settled,
    claim_delivery,
    mark_provider_called,
    record_accepted,
    record_failure,
    record_unknown,
)
from db.pool import retrying
from db.tenancy import tenant_tx
from domain.delivery import ErrorClass, email_message_id, email_text, retry_delay, should_retry
from domain.unsubscribe import unsubscribe_token
from tocsin import runtime
from tocsin.config import Settings
from tocsin.signing_keys import signing_keys
from tocsin.timekeeping import utcnow

# Ids, attempts and outcomes only: never addresses or message bodies.
log = logging.getLogger("tocsin.email")

@dramatiq.actor(queue_name="email", time_limit=2 * 60_000, max_age=60 * 60_000)  # milliseconds
def deliver_email(slug: str, delivery_id: int) -> None:
    """Safe to run any number of times, at once or in sequence: only the run whose claim
    moves the delivery to sending calls the provider; the others find nothing to do."""
    settings = runtime.settings()
    claim = _claim(slug, delivery_id, settings)
    if claim is None:
        return
    try:
        get_limiter().acquire()
    except RateLimited as error:
        _record_error(slug, claim, ProviderError(ErrorClass.TRANSIENT, f"local rate limit: {error}"))
        return
    with tenant_tx(slug) as tx:
        if not mark_provider_called(tx, claim):
            log.warning("delivery tenant=%s id=%d attempt=%d lease lost before the send; not sent",
                        slug, claim.delivery_id, claim.attempt)
            return
    EMAIL_ATTEMPTS.inc()
    try:
        accepted = get_mailer().send(_compose(slug, claim, settings))
    except ProviderError as error:
        EMAIL_ERRORS.labels(error.error_class.value).inc()
        _record_error(slug, claim, error)
        return
    except BaseException as error:  # a time limit or shutdown while the request was out
        EMAIL_ERRORS.labels(ErrorClass.UNCERTAIN.value).inc()
        _record_lost_answer(slug, claim, type(error).__name__)
        raise
    recorded = retrying(lambda: _accepted(slug, claim, accepted.provider_message_id, accepted.request_id))
    log.info("delivery tenant=%s id=%d attempt=%d accepted request=%s%s", slug, claim.delivery_id,
             claim.attempt, accepted.request_id,
             "" if recorded else " (another worker holds it now: not recorded)")


def _claim(slug: str, delivery_id: int, settings: Settings) -> ClaimedEmail | None:
    with tenant_tx(slug) as tx:
        claim = claim_delivery(tx, delivery_id, settings.delivery_lease_seconds, utcnow(),
                               settings.portal_url)
    if isinstance(claim, Settled):
        log.info("delivery tenant=%s id=%d not sent now (%s): %s", slug, delivery_id, claim.action,
                 claim.reason)
        return None
    return claim


def _compose(slug: str, claim: ClaimedEmail, settings: Settings) -> OutgoingEmail:
    sender_domain = parseaddr(settings.mail_from)[1].rpartition("@")[2] or "tocsin.invalid"
    message_id = email_message_id(slug, claim.delivery_id, sender_domain)
    tags = {"tenant": slug, "delivery": str(claim.delivery_id)}
    if claim.category is None:  # a digest: its text carries its links and the preferences link
        return OutgoingEmail(message_id, claim.recipient, claim.title, claim.body, tags)
    link = f"{settings.portal_url}{claim.href}" if claim.href else None
    key = signing_keys(settings).unsubscribe.current
    token = unsubscribe_token(key, slug, claim.recipient_user_id, claim.category, utcnow())
    unsubscribe = f"{settings.portal_url}/unsubscribe/{token}"
    return OutgoingEmail(message_id, claim.recipient, claim.title,
                         email_text(claim.body, link, unsubscribe), tags, unsubscribe_url=unsubscribe)


def _accepted(slug: str, claim: ClaimedEmail, message_id: str, request_id: str | None) -> bool:
    with tenant_tx(slug) as tx:
        return record_accepted(tx, claim, message_id, request_id)


def _record_lost_answer(slug: str, claim: ClaimedEmail, why: str) -> None:
    log.warning("delivery tenant=%s id=%d attempt=%d outcome unknown (%s)", slug, claim.delivery_id,
                claim.attempt, why)
    try:
        with tenant_tx(slug) as tx:
            record_unknown(tx, claim, f"no answer from the provider ({why})")
    except Exception:  # the sweeper turns the expired lease into unknown instead
        log.exception("delivery tenant=%s id=%d could not record the unknown outcome", slug,
                      claim.delivery_id)


def _record_error(slug: str, claim: ClaimedEmail, error: ProviderError) -> None:
    if error.error_class is ErrorClass.UNCERTAIN:
        _record_lost_answer(slug, claim, str(error))
        return
    retry_at = None
    if should_retry(error.error_class, claim.attempt):
        retry_at = datetime.now(UTC) + retry_delay(claim.attempt, random.random())
    log.warning("delivery tenant=%s id=%d attempt=%d %s error: %s; %s", slug, claim.delivery_id,
                claim.attempt, error.error_class.value, error,
                f"retry after {retry_at:%H:%M:%S}Z" if retry_at else "failed for good")

    def write() -> bool:
        with tenant_tx(slug) as tx:
            return record_failure(tx, claim, error_class=error.error_class.value, error=str(error),
                                  retry_at=retry_at, request_id=error.request_id)

    retrying(write)
