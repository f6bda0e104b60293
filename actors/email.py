"""deliver_email: for a few deliveries of one tenant, check and claim (committed), wait
for send slots, note the calls (committed), send each through the provider, record the
outcomes (fenced by each claim's token).

The steps and the in-flight boundary they leave are described in db/deliveries.py.
"""

from __future__ import annotations

import logging
import random
import time
from datetime import UTC, datetime
from email.utils import parseaddr
from functools import lru_cache

import dramatiq

from actors.metrics import EMAIL_ATTEMPTS, EMAIL_ERRORS
from actors.rate_limit import RateLimited, get_limiter
from actors.ses import Accepted, OutgoingEmail, ProviderError, get_mailer
from db.deliveries import (
    ClaimedEmail,
    Settled,
    claim_deliveries,
    mark_providers_called,
    record_acceptances,
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

EMAILS_PER_MESSAGE = 20  # deliveries of one tenant that one deliver_email message carries
SEND_WINDOW = 1.0  # seconds: under a send rate, the slots marked provider-called at once span this
# At most this many deliveries are marked provider-called ahead of their sends: what a
# worker killed mid-message leaves uncertain (resent once, same Message-ID, unless an SES
# event settles it), per thread. One mark per delivery would cost a statement each.
MARKED_AHEAD = 5


# The time limit stays under the default lease (5 minutes): a stuck worker records its
# outcome before the sweeper may take its deliveries over.
@dramatiq.actor(queue_name="email", time_limit=4 * 60_000, max_age=60 * 60_000)  # milliseconds
def deliver_email(slug: str, *delivery_ids: int) -> None:
    """Send up to EMAILS_PER_MESSAGE deliveries of one tenant: one claim transaction for
    them all, one provider-called mark per group of send slots, one call each, one
    transaction for the acceptances. Per-delivery transactions and messages cost a
    delivery several times what the provider call does.

    Safe to run any number of times, at once or in sequence: only the run whose claim
    moves a delivery to sending calls the provider for it; the others find nothing to do."""
    settings = runtime.settings()
    # Sends start only while half the lease is left: past that, a slow provider could keep
    # a call going until the sweeper takes the delivery over and sends it again.
    send_until = time.monotonic() + settings.delivery_lease_seconds / 2
    claims = _claim(slug, sorted(set(delivery_ids)), settings)
    if claims:
        _Batch(slug, claims, settings, send_until).send()


class _Batch:
    """The claimed deliveries of one message, each ending recorded: accepted, failed or
    unknown, or released unsent when the worker stops before its turn."""

    def __init__(self, slug: str, claims: list[ClaimedEmail], settings: Settings, send_until: float):
        self.slug = slug
        self.settings = settings
        self.send_until = send_until
        self.waiting = list(claims)  # claimed, not yet handed to the provider
        self.accepted: list[tuple[ClaimedEmail, Accepted]] = []

    def send(self) -> None:
        limiter = get_limiter()
        group_size = max(1, min(MARKED_AHEAD, int(limiter.per_second * SEND_WINDOW)))
        try:
            while self.waiting:
                group = self.waiting[:group_size]
                try:
                    slots = limiter.reserve(len(group))
                except RateLimited as error:
                    for claim in list(self.waiting):
                        self.waiting.remove(claim)
                        _record_error(self.slug, claim, ProviderError(
                            ErrorClass.TRANSIENT, f"local rate limit: {error}"))
                    return
                called = _mark_called(self.slug, group)
                for n, claim in enumerate(group):
                    if claim not in called:
                        self.waiting.remove(claim)
                        log.warning("delivery tenant=%s id=%d attempt=%d lease lost before the send; "
                                    "not sent", self.slug, claim.delivery_id, claim.attempt)
                        continue
                    slots.wait_for(n)
                    if time.monotonic() > self.send_until:
                        self._release("the lease was running out")
                        return
                    self._send_one(claim)
        except BaseException as error:  # a time limit or shutdown: what was not sent goes back
            self._release(f"the worker stopped ({type(error).__name__})")
            raise
        finally:
            self._record_accepted()

    def _send_one(self, claim: ClaimedEmail) -> None:
        self.waiting.remove(claim)
        EMAIL_ATTEMPTS.inc()
        try:
            accepted = get_mailer().send(_compose(self.slug, claim, self.settings))
        except ProviderError as error:
            EMAIL_ERRORS.labels(error.error_class.value).inc()
            _record_error(self.slug, claim, error)
            return
        except BaseException as error:  # a time limit or shutdown while the request was out
            EMAIL_ERRORS.labels(ErrorClass.UNCERTAIN.value).inc()
            _record_lost_answer(self.slug, claim, type(error).__name__)
            raise
        self.accepted.append((claim, accepted))

    def _release(self, why: str) -> None:
        """Back to pending, due now: these were claimed (some marked provider-called) but never
        handed to the provider, so they are not unknown; each attempt ends as a retry."""
        released, self.waiting = self.waiting, []
        if not released:
            return
        log.warning("delivery tenant=%s ids=%s not sent: %s; pending again", self.slug,
                    ",".join(str(c.delivery_id) for c in released), why)
        try:
            retrying(lambda: _released(self.slug, released, f"not sent: {why}"))
        except Exception:  # the sweeper recovers their expired leases instead
            log.exception("delivery tenant=%s could not release unsent deliveries", self.slug)

    def _record_accepted(self) -> None:
        if not self.accepted:
            return
        recorded = retrying(lambda: _accepted(self.slug, self.accepted))
        # One record for the message's acceptances, not one per delivery: each record is
        # formatted here and copied once more by Dramatiq's parent process.
        if log.isEnabledFor(logging.INFO):
            log.info("delivery tenant=%s accepted: %s", self.slug, ", ".join(
                f"id={claim.delivery_id} attempt={claim.attempt} request={accepted.request_id}"
                + ("" if claim.delivery_id in recorded else " (another worker holds it now: not recorded)")
                for claim, accepted in self.accepted))
        self.accepted = []


def _claim(slug: str, delivery_ids: list[int], settings: Settings) -> list[ClaimedEmail]:
    """One transaction: each delivery claimed, or settled (cancelled, deferred, batched),
    or not ours. In id order, as every claim takes its row locks, so two messages naming
    the same deliveries cannot deadlock."""
    with tenant_tx(slug) as tx:
        results = claim_deliveries(tx, delivery_ids, settings.delivery_lease_seconds, utcnow(),
                                   settings.portal_url)
    claims = []
    for result in results:
        if isinstance(result, Settled):
            log.info("delivery tenant=%s id=%d not sent now (%s): %s", slug, result.delivery_id,
                     result.action, result.reason)
        else:
            claims.append(result)
    return claims


def _mark_called(slug: str, claims: list[ClaimedEmail]) -> list[ClaimedEmail]:
    """Committed before the first of these calls: the claims whose lease still holds."""
    with tenant_tx(slug) as tx:
        marked = mark_providers_called(tx, claims)
    return [c for c in claims if c.delivery_id in marked]


@lru_cache(maxsize=4)  # one sender per process: parsed once, not for every email
def _sender_domain(mail_from: str) -> str:
    return parseaddr(mail_from)[1].rpartition("@")[2] or "tocsin.invalid"


def _compose(slug: str, claim: ClaimedEmail, settings: Settings) -> OutgoingEmail:
    message_id = email_message_id(slug, claim.delivery_id, _sender_domain(settings.mail_from))
    tags = {"tenant": slug, "delivery": str(claim.delivery_id)}
    if claim.category is None:  # a digest: its text carries its links and the preferences link
        return OutgoingEmail(message_id, claim.recipient, claim.title, claim.body, tags)
    link = f"{settings.portal_url}{claim.href}" if claim.href else None
    key = signing_keys(settings).unsubscribe.current
    token = unsubscribe_token(key, slug, claim.recipient_user_id, claim.category, utcnow())
    unsubscribe = f"{settings.portal_url}/unsubscribe/{token}"
    return OutgoingEmail(message_id, claim.recipient, claim.title,
                         email_text(claim.body, link, unsubscribe), tags, unsubscribe_url=unsubscribe)


def _accepted(slug: str, accepted: list[tuple[ClaimedEmail, Accepted]]) -> set[int]:
    """The acceptances in one transaction: the delivery ids recorded (a row another worker
    has claimed since is not)."""
    with tenant_tx(slug) as tx:
        return record_acceptances(tx, [(claim, answer.provider_message_id, answer.request_id)
                                       for claim, answer in accepted])


def _released(slug: str, claims: list[ClaimedEmail], why: str) -> None:
    now = datetime.now(UTC)
    with tenant_tx(slug) as tx:
        for claim in claims:
            record_failure(tx, claim, error_class=ErrorClass.TRANSIENT.value, error=why, retry_at=now)


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
