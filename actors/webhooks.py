"""deliver_webhooks: for a few webhook deliveries of one tenant, claim them (committed), then
for each: the SSRF guard's decision on the resolved address, the call marked (committed),
one signed POST, its answer recorded, fenced by the claim's token.

The steps and what a crash leaves are described in db/delivery/webhook_deliveries.py.
"""

from __future__ import annotations

import logging
import random
import time
from datetime import timedelta

import dramatiq

from db.delivery.webhook_deliveries import (
    ClaimedWebhook,
    Recorded,
    claim_webhooks,
    mark_called,
    record_answer,
    record_success_and_mark,
    release_unsent,
)
from domain.delivery.states import ErrorClass
from domain.delivery.webhooks import CallAnswer, DestinationRefused, webhook_id
from tocsin.core import runtime
from tocsin.core.clock import utcnow
from tocsin.core.settings import Settings
from tocsin.providers.webhook_http import get_sender

__all__ = ["WEBHOOKS_PER_MESSAGE", "deliver_webhooks", "send_webhooks"]

# Ids, attempts, status codes and outcomes only: never payloads, secrets or URLs.
log = logging.getLogger("tocsin.webhooks")

WEBHOOKS_PER_MESSAGE = 20  # deliveries of one tenant that one deliver_webhooks message carries
WAKE_SLACK_MS = 50  # milliseconds a retry's wake-up waits past its due time


# The time limit stays under the default lease (5 minutes), so a stuck worker gives its
# deliveries back before the sweeper may take them over.
@dramatiq.actor(queue_name="webhooks", time_limit=4 * 60_000, max_age=60 * 60_000)  # milliseconds
def deliver_webhooks(slug: str, *delivery_ids: int) -> None:
    """Call the endpoints of up to WEBHOOKS_PER_MESSAGE due deliveries of one tenant.

    Safe to run any number of times: only the run whose claim moved a delivery to sending
    calls its endpoint; a repeat of a call carries the same webhook-id."""
    settings = runtime.settings()
    # A call starts only while half the lease is left: a slower one could still be going
    # when the sweeper takes the delivery back and sends it again.
    start_until = time.monotonic() + settings.delivery_lease_seconds / 2
    claims = claim_webhooks(slug, sorted(set(delivery_ids)), settings.delivery_lease_seconds)
    if claims:
        _Batch(slug, settings).run(claims, start_until)


class _Batch:
    """The claimed deliveries of one message, called one after another. A success is held
    until the next call's mark and committed with it (one round trip per call); anything
    else is recorded at once. At the end, or when the worker stops, the held success is
    recorded and what was never called goes back to pending."""

    def __init__(self, slug: str, settings: Settings):
        self.slug = slug
        self.settings = settings
        self.sender = get_sender(settings.webhook_allow_private, settings.webhook_timeout_seconds)
        self.held: tuple[ClaimedWebhook, CallAnswer] | None = None

    def run(self, claims: list[ClaimedWebhook], start_until: float) -> None:
        n = 0
        try:
            for n, claim in enumerate(claims):
                if time.monotonic() > start_until:
                    self._flush()
                    release_unsent(self.slug, claims[n:], "the lease was running out before the call")
                    send_webhooks(self.slug, [c.delivery_id for c in claims[n:]])
                    return
                self._call(claim)
        except BaseException as error:  # a time limit or shutdown: what was not called goes back
            self._flush()
            release_unsent(self.slug, claims[n + 1:], f"the worker stopped ({type(error).__name__})")
            raise
        self._flush()

    def _call(self, claim: ClaimedWebhook) -> None:
        wid = webhook_id(self.slug, claim.delivery_id)
        try:
            # The guard decides on the resolved addresses before any connection is attempted.
            call = self.sender.prepare(claim.url, wid, utcnow(), claim.body, claim.secrets)
        except DestinationRefused as guard:
            self._record(claim, CallAnswer(None, 0, None, str(guard), ErrorClass.TRANSIENT, sent=False,
                                           refused=True))
            return
        if self.held is not None:
            done, answer = self.held
            self.held = None
            recorded, marked = record_success_and_mark(self.slug, done, answer, claim)
            self._log(done, answer, recorded)
        else:
            marked = mark_called(self.slug, claim)
        if marked.secrets is None:
            log.warning("webhook tenant=%s id=%d attempt=%d not sent: %s",
                        self.slug, claim.delivery_id, claim.attempt, marked.refused)
            return
        call.sign(marked.secrets, utcnow(), claim.body)
        answer = self.sender.send(call, claim.body)
        if answer.error_class is None:
            self.held = (claim, answer)
        else:
            self._record(claim, answer)

    def _flush(self) -> None:
        if self.held is not None:
            claim, answer = self.held
            self.held = None
            self._record(claim, answer)

    def _record(self, claim: ClaimedWebhook, answer: CallAnswer) -> None:
        recorded = record_answer(self.slug, claim, answer, jitter=random.random(),
                                 retry_base=timedelta(seconds=self.settings.webhook_retry_base_seconds))
        self._log(claim, answer, recorded)
        if recorded.retry_in is not None:
            # A wake-up only: the retry's time is in PostgreSQL, and the sweeper finds it too.
            deliver_webhooks.send_with_options(
                args=(self.slug, claim.delivery_id),
                delay=int(recorded.retry_in.total_seconds() * 1000) + WAKE_SLACK_MS)

    def _log(self, claim: ClaimedWebhook, answer: CallAnswer, recorded: Recorded) -> None:
        log.info("webhook tenant=%s id=%d attempt=%d status=%s code=%s latency_ms=%d -> %s%s",
                 self.slug, claim.delivery_id, claim.attempt, "ok" if answer.error_class is None
                 else answer.error_class, answer.status_code, answer.latency_ms,
                 recorded.status or "taken over", " (endpoint disabled)" if recorded.disabled else "")


def send_webhooks(slug: str, delivery_ids: list[int]) -> None:
    """Hand deliveries committed as due to the webhook workers (the SendWebhooks effect,
    wired by tocsin/boot/effects.py). A send that fails leaves them to the sweeper."""
    for start in range(0, len(delivery_ids), WEBHOOKS_PER_MESSAGE):
        deliver_webhooks.send(slug, *delivery_ids[start:start + WEBHOOKS_PER_MESSAGE])
