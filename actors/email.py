"""deliver_email: for a few deliveries of one tenant, check and claim (committed), then
for each: wait for its send slot, note the call (committed, with the previous call's
answer), send it through the provider; every outcome fenced by its claim's token.

The steps and the in-flight boundary they leave are described in db/delivery/deliveries.py.
"""

from __future__ import annotations

import logging
import random
import time
from email.utils import parseaddr
from functools import lru_cache

import dramatiq

from db.delivery.deliveries import (
    Answer,
    ClaimedEmail,
    Recorded,
    Settled,
    claim_deliveries,
    record_failure,
    record_step_at_once,
    record_unknown,
)
from db.delivery.email_context import EmailContext, email_contexts
from db.delivery.email_failover import note_failover, reset_ses_run, ses_failure_reason
from db.delivery.email_templates import record_template_fallback
from db.platform.pool import retrying
from db.platform.tenancy import tenant_tx
from domain.delivery.failover import SesFailure
from domain.delivery.states import ErrorClass, email_message_id, email_text, retry_delay, should_retry
from domain.delivery.unsubscribe import unsubscribe_token
from tocsin.core import runtime
from tocsin.core.clock import utcnow
from tocsin.core.keys import signing_keys
from tocsin.core.settings import Settings
from tocsin.monitoring.metrics import EMAIL_ATTEMPTS, EMAIL_ERRORS
from tocsin.providers.email_compose import render_email
from tocsin.providers.send_rate import RateLimited, get_limiter
from tocsin.providers.ses import OutgoingEmail, ProviderError, get_mailer
from tocsin.providers.smtp import get_smtp_mailer

__all__ = [
    "ANSWER_FLUSH_WITHIN",
    "ANSWER_PATIENCE",
    "EMAILS_PER_MESSAGE",
    "SLOTS_AHEAD",
    "SLOT_WINDOW",
    "deliver_email",
    "send_deliveries",
]

# Ids, attempts and outcomes only: never addresses or message bodies.
log = logging.getLogger("tocsin.email")

EMAILS_PER_MESSAGE = 20  # deliveries of one tenant that one deliver_email message carries
SLOTS_AHEAD = 5  # send slots reserved in one round trip to Redis (spread over SLOT_WINDOW at most)
SLOT_WINDOW = 1.0  # seconds: under a send rate, the slots reserved at once span at most this
# An answer is recorded together with the next call's provider-called mark when that call's
# slot comes within this; otherwise alone, at once. Either way it is committed no later than
# this after it arrived, and a crash leaves uncertain only the calls in flight.
ANSWER_FLUSH_WITHIN = 0.1  # seconds
# A provider's answer is retried on fresh connections for this long when PostgreSQL is
# unreachable (a restart, a failover): an answer given up on becomes unknown and is resent.
ANSWER_PATIENCE = 60.0  # seconds

# Tenants whose SES failure streak this process added to: its next acceptance resets the
# streak (one write after a failure, none on the usual path).
_ses_runs_open: set[str] = set()


# The time limit stays under the default lease (5 minutes): a stuck worker records its
# outcome before the sweeper may take its deliveries over.
@dramatiq.actor(queue_name="email", time_limit=4 * 60_000, max_age=60 * 60_000)  # milliseconds
def deliver_email(slug: str, *delivery_ids: int) -> None:
    """Send up to EMAILS_PER_MESSAGE deliveries of one tenant: one claim transaction for
    them all, then for each call one transaction that records the previous call's answer
    and marks this call provider-called. Per-delivery messages and claims cost a delivery
    several times what the provider call does.

    Safe to run any number of times, at once or in sequence: only the run whose claim
    moves a delivery to sending calls the provider for it; the others find nothing to do."""
    settings = runtime.settings()
    # Sends start only while half the lease is left: past that, a slow provider could keep
    # a call going until the sweeper takes the delivery over and sends it again.
    send_until = time.monotonic() + settings.delivery_lease_seconds / 2
    claims, contexts = _claim(slug, sorted(set(delivery_ids)), settings)
    if claims:
        _Batch(slug, claims, settings, send_until, contexts).send()


class _Batch:
    """The claimed deliveries of one message, each ending recorded: accepted, failed or
    unknown, or released unsent when the worker stops before its turn.

    At any instant at most one of them is marked provider-called without an outcome: the
    call in flight, or the answer just received and about to be committed."""

    def __init__(self, slug: str, claims: list[ClaimedEmail], settings: Settings, send_until: float,
                 contexts: dict[int, EmailContext] | None = None):
        self.slug = slug
        self.contexts = contexts or {}
        self.settings = settings
        self.send_until = send_until
        self.waiting = list(claims)  # claimed, not yet handed to the provider
        self.answered: Answer | None = None  # the last call's acceptance, not yet recorded
        self.outcomes: list[str] = []  # what became of each recorded answer, logged once

    def send(self) -> None:
        limiter = get_limiter()
        group_size = max(1, min(SLOTS_AHEAD, int(limiter.per_second * SLOT_WINDOW)))
        try:
            while self.waiting:
                group = self.waiting[:group_size]
                try:
                    slots = limiter.reserve(len(group))
                except RateLimited as error:
                    self._flush()
                    for claim in list(self.waiting):
                        self.waiting.remove(claim)
                        _record_error(self.slug, claim, ProviderError(
                            ErrorClass.TRANSIENT, f"local rate limit: {error}"))
                    return
                for n, claim in enumerate(group):
                    if slots.seconds_until(n) > ANSWER_FLUSH_WITHIN:
                        self._flush()  # not held back while this call waits for its slot
                    slots.wait_for(n)
                    if time.monotonic() > self.send_until:
                        self._release("the lease was running out")
                        return
                    if not self._mark(claim):
                        self.waiting.remove(claim)
                        log.warning("delivery tenant=%s id=%d attempt=%d lease lost before the send; "
                                    "not sent", self.slug, claim.delivery_id, claim.attempt)
                        continue
                    self._send_one(claim)
        except BaseException as error:  # a time limit or shutdown: what was not sent goes back
            self._release(f"the worker stopped ({type(error).__name__})")
            raise
        finally:
            try:
                self._flush()
            finally:
                self._log_outcomes()

    def _mark(self, claim: ClaimedEmail) -> bool:
        """Committed before the call: the last answer, and this call marked provider-called.
        False when the lease has run out or the delivery is no longer ours: do not call."""
        answered, self.answered = self.answered, None
        recorded = _write_step(self.slug, answered, claim)
        if answered is not None:
            self._note(answered, recorded)
        return claim.delivery_id in recorded.marked

    def _flush(self) -> None:
        answered, self.answered = self.answered, None
        if answered is not None:
            self._note(answered, _write_step(self.slug, answered, None))

    def _note(self, answer: Answer, recorded: Recorded) -> None:
        claim = answer.claim
        outcome = f"id={claim.delivery_id} attempt={claim.attempt} request={answer.request_id}"
        if claim.delivery_id in recorded.late:
            outcome += " (resent meanwhile: recorded on the attempt)"
        elif claim.delivery_id not in recorded.accepted:
            outcome += " (the attempt had ended otherwise: not recorded)"
        self.outcomes.append(outcome)

    def _log_outcomes(self) -> None:
        # One record for the message's acceptances, not one per delivery: each record is
        # formatted here and copied once more by Dramatiq's parent process.
        if self.outcomes and log.isEnabledFor(logging.INFO):
            log.info("delivery tenant=%s accepted: %s", self.slug, ", ".join(self.outcomes))
        self.outcomes = []

    def _send_one(self, claim: ClaimedEmail) -> None:
        self.waiting.remove(claim)
        EMAIL_ATTEMPTS.inc()
        outgoing: OutgoingEmail | None = None
        try:
            outgoing = _compose(self.slug, claim, self.settings, self.contexts.get(claim.delivery_id))
            accepted = get_mailer().send(outgoing)
        except ProviderError as error:
            EMAIL_ERRORS.labels(error.error_class.value).inc()
            if outgoing is None or not self._fail_over(claim, outgoing, error):
                _record_error(self.slug, claim, error)
            return
        except BaseException as error:  # a time limit or shutdown while the request was out
            EMAIL_ERRORS.labels(ErrorClass.UNCERTAIN.value).inc()
            _record_lost_answer(self.slug, claim, type(error).__name__)
            raise
        if self.slug in _ses_runs_open:  # the first acceptance after a failure ends the streak
            _ses_runs_open.discard(self.slug)
            retrying(lambda: reset_ses_run(self.slug))
        self.answered = Answer(claim, accepted.provider_message_id, accepted.request_id)

    def _fail_over(self, claim: ClaimedEmail, outgoing: OutgoingEmail, error: ProviderError) -> bool:
        """When SES failed in a class the tenant chose: the same email (same Message-ID)
        through SMTP, the attempt marked with both providers before the call. True when the
        attempt's outcome was recorded here (or the delivery is no longer ours)."""
        smtp = get_smtp_mailer()
        if error.error_class is ErrorClass.UNCERTAIN or smtp is None:
            return False  # an uncertain SES call may have sent it: resending elsewhere doubles it
        failure = SesFailure(error.code, error.http_status)
        reason = retrying(lambda: ses_failure_reason(self.slug, failure, utcnow()))
        if failure.server_error or failure.throttled:
            _ses_runs_open.add(self.slug)
        if reason is None:
            return False
        if not retrying(lambda: note_failover(self.slug, claim, reason)):
            log.warning("delivery tenant=%s id=%d attempt=%d lease lost before the SMTP failover; "
                        "not sent", self.slug, claim.delivery_id, claim.attempt)
            return True
        log.warning("delivery tenant=%s id=%d attempt=%d through SMTP: %s", self.slug,
                    claim.delivery_id, claim.attempt, reason)
        try:
            accepted = smtp.send(outgoing)
        except ProviderError as smtp_error:
            _record_error(self.slug, claim, ProviderError(
                smtp_error.error_class, f"{error}; then through SMTP: {smtp_error}", error.request_id))
            return True
        except BaseException as stopped:
            _record_lost_answer(self.slug, claim, f"SMTP: {type(stopped).__name__}")
            raise
        self.answered = Answer(claim, accepted.provider_message_id, error.request_id)
        return True

    def _release(self, why: str) -> None:
        """Back to pending, due now: these were claimed but never handed to the provider, so
        they are not unknown; each attempt ends as a retry."""
        released, self.waiting = self.waiting, []
        if not released:
            return
        log.warning("delivery tenant=%s ids=%s not sent: %s; pending again", self.slug,
                    ",".join(str(c.delivery_id) for c in released), why)
        try:
            retrying(lambda: _released(self.slug, released, f"not sent: {why}"))
        except Exception:  # the sweeper recovers their expired leases instead
            log.exception("delivery tenant=%s could not release unsent deliveries", self.slug)


def _write_step(slug: str, answer: Answer | None, call: ClaimedEmail | None) -> Recorded:
    """``record_step`` in a transaction of its own; retried while PostgreSQL is unreachable,
    for as long as ANSWER_PATIENCE when it carries an answer."""
    return retrying(lambda: record_step_at_once(slug, answer, call),
                    patience=ANSWER_PATIENCE if answer is not None else 0.0)


def _claim(slug: str, delivery_ids: list[int], settings: Settings
           ) -> tuple[list[ClaimedEmail], dict[int, EmailContext]]:
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
        contexts = email_contexts(tx, [c.delivery_id for c in claims])
    return claims, contexts


@lru_cache(maxsize=4)  # one sender per process: parsed once, not for every email
def _sender_domain(mail_from: str) -> str:
    return parseaddr(mail_from)[1].rpartition("@")[2] or "tocsin.invalid"


def _compose(slug: str, claim: ClaimedEmail, settings: Settings,
             context: EmailContext | None = None) -> OutgoingEmail:
    message_id = email_message_id(slug, claim.delivery_id, _sender_domain(settings.mail_from))
    tags = {"tenant": slug, "delivery": str(claim.delivery_id)}
    unsubscribe = None
    if claim.category is not None:  # a digest has no category: its preferences link serves
        key = signing_keys(settings).unsubscribe.current
        token = unsubscribe_token(key, slug, claim.recipient_user_id, claim.category, utcnow())
        unsubscribe = f"{settings.portal_url}/unsubscribe/{token}"
    if context is not None:
        try:
            rendered = render_email(context.facts, context.zone,
                                    context.brand.brand(settings.portal_url), settings.portal_url,
                                    unsubscribe, context.template)
            if rendered.fallback is not None and context.template is not None:
                _record_fallback(slug, claim.delivery_id, context, rendered.fallback)
            return OutgoingEmail(message_id, claim.recipient, rendered.subject, rendered.text, tags,
                                 unsubscribe_url=unsubscribe, html=rendered.html,
                                 reply_to=context.brand.reply_to or None)
        except Exception:  # a reminder is never lost to its layout: it goes as plain text
            log.exception("delivery tenant=%s id=%d could not be rendered; sent as plain text",
                          slug, claim.delivery_id)
    if claim.category is None:  # a digest: its text carries its links and the preferences link
        return OutgoingEmail(message_id, claim.recipient, claim.title, claim.body, tags)
    link = f"{settings.portal_url}{claim.href}" if claim.href else None
    return OutgoingEmail(message_id, claim.recipient, claim.title,
                         email_text(claim.body, link, unsubscribe), tags, unsubscribe_url=unsubscribe)


def _record_fallback(slug: str, delivery_id: int, context: EmailContext, why: str) -> None:
    """The delivery says it went with the shipped copy (ledger, Needs attention). The email goes
    whether or not this is written: a broken template never loses a reminder."""
    assert context.template is not None
    log.warning("delivery tenant=%s id=%d template %s/%s failed; shipped copy sent", slug,
                delivery_id, context.template.kind, context.template.locale)
    try:
        with tenant_tx(slug) as tx:
            record_template_fallback(tx, delivery_id, context.template, why)
    except Exception:
        log.exception("delivery tenant=%s id=%d could not record its template fallback", slug,
                      delivery_id)


def _released(slug: str, claims: list[ClaimedEmail], why: str) -> None:
    now = utcnow()
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
        retry_at = utcnow() + retry_delay(claim.attempt, random.random())
    log.warning("delivery tenant=%s id=%d attempt=%d %s error: %s; %s", slug, claim.delivery_id,
                claim.attempt, error.error_class.value, error,
                f"retry after {retry_at:%H:%M:%S}Z" if retry_at else "failed for good")

    def write() -> bool:
        with tenant_tx(slug) as tx:
            return record_failure(tx, claim, error_class=error.error_class.value, error=str(error),
                                  retry_at=retry_at, request_id=error.request_id)

    retrying(write)


def send_deliveries(slug: str, delivery_ids: list[int]) -> None:
    """Hand deliveries marked enqueued in a committed transaction to the email workers (the
    SendEmails effect, wired by tocsin/boot/effects.py): one deliver_email message per
    EMAILS_PER_MESSAGE deliveries of the tenant. A send that fails (Redis down) leaves them to
    the sweeper, which re-sends stale ones."""
    for start in range(0, len(delivery_ids), EMAILS_PER_MESSAGE):
        deliver_email.send(slug, *delivery_ids[start:start + EMAILS_PER_MESSAGE])
