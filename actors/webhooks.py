"""deliver_webhooks: for a few webhook deliveries of one tenant, claim them (committed), then
in groups: the SSRF guard's decision on each resolved address, the group's calls marked
(committed, with the previous group's successes), one signed POST each, every answer recorded,
fenced by the claim's token.

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
    end_marked_unsent,
    record_answer,
    record_successes_and_mark,
    release_unsent,
)
from domain.delivery.channels import CHANNELS, Channel, calls_per_commit
from domain.delivery.states import ErrorClass
from domain.delivery.webhooks import CallAnswer, DestinationRefused, webhook_id
from tocsin.core import runtime
from tocsin.core.clock import utcnow
from tocsin.core.settings import Settings
from tocsin.providers.webhook_http import PinnedDestination, get_sender

__all__ = ["WEBHOOKS_PER_MESSAGE", "deliver_webhooks", "send_webhooks"]

# Ids, attempts, status codes and outcomes only: never payloads, secrets or URLs.
log = logging.getLogger("tocsin.webhooks")

WEBHOOKS_PER_MESSAGE = 20  # deliveries of one tenant that one deliver_webhooks message carries
WAKE_SLACK_MS = 50  # milliseconds a retry's wake-up waits past its due time
GROUP = calls_per_commit(CHANNELS[Channel.WEBHOOK])  # calls marked called in one commit


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
        _Batch(slug, settings, start_until).run(claims)


class _Batch:
    """The claimed deliveries of one message, called in groups of GROUP: a group's calls are
    marked in one commit, which also records the previous group's successes (one commit per
    group, not one per call); anything but a success is recorded at once. The receiver drops
    a repeat by its webhook-id, so a crash may leave a group's calls uncertain (at most GROUP
    per sending thread) and costs only recognisable repeats. At the end, or when the worker
    stops, the held successes are recorded and what was never marked goes back to pending;
    a call marked but not made is the sweeper's (unknown, then sent again)."""

    def __init__(self, slug: str, settings: Settings, start_until: float):
        self.slug = slug
        self.settings = settings
        self.start_until = start_until
        self.sender = get_sender(settings.webhook_allow_private, settings.webhook_timeout_seconds)
        self.held: list[tuple[ClaimedWebhook, CallAnswer]] = []  # successes not yet recorded
        self.unmarked: list[ClaimedWebhook] = []  # claimed, not yet marked called

    def run(self, claims: list[ClaimedWebhook]) -> None:
        self.unmarked = list(claims)
        try:
            while self.unmarked:
                if time.monotonic() > self.start_until:
                    self._flush()
                    unsent, self.unmarked = self.unmarked, []
                    release_unsent(self.slug, unsent, "the lease was running out before the call")
                    send_webhooks(self.slug, [c.delivery_id for c in unsent])
                    return
                self._call_group(self.unmarked[:GROUP])
        except BaseException as error:  # a time limit or shutdown: what was not marked goes back
            self._flush()
            unsent, self.unmarked = self.unmarked, []
            release_unsent(self.slug, unsent, f"the worker stopped ({type(error).__name__})")
            raise
        self._flush()

    def _call_group(self, group: list[ClaimedWebhook]) -> None:
        calls = []
        judged: dict[str, PinnedDestination] = {}  # one resolution per URL in the group
        for claim in group:
            wid = webhook_id(self.slug, claim.delivery_id)
            try:
                # The guard decides on the resolved addresses before any connection is attempted.
                calls.append((claim, self.sender.prepare(claim.url, wid, judged)))
            except DestinationRefused as guard:
                self.unmarked.remove(claim)
                self._record(claim, CallAnswer(None, 0, None, str(guard), ErrorClass.TRANSIENT,
                                               sent=False, refused=True))
        done, self.held = self.held, []
        recorded, marks = record_successes_and_mark(self.slug, done, [claim for claim, _ in calls])
        for claim, _ in calls:
            self.unmarked.remove(claim)
        for (claim, answer), result in zip(done, recorded, strict=True):
            self._log(claim, answer, result)
        stopped: dict[int, tuple[str, bool]] = {}  # endpoint -> why its other calls wait, cancel?
        unsent: list[tuple[ClaimedWebhook, str, bool]] = []
        for claim, call in calls:
            marked = marks[claim.delivery_id]
            if marked.secrets is None:
                log.warning("webhook tenant=%s id=%d attempt=%d not sent: %s",
                            self.slug, claim.delivery_id, claim.attempt, marked.refused)
                continue
            if claim.endpoint_id in stopped:
                why, cancel = stopped[claim.endpoint_id]
                unsent.append((claim, why, cancel))
                continue
            if time.monotonic() > self.start_until:  # marked: the sweeper sends it again
                log.warning("webhook tenant=%s id=%d attempt=%d not sent: the lease was running "
                            "out; left to the sweeper", self.slug, claim.delivery_id, claim.attempt)
                continue
            call.sign(marked.secrets, utcnow(), claim.body)
            answer = self.sender.send(call, claim.body)
            if answer.error_class is None:
                self.held.append((claim, answer))
                continue
            outcome = self._record(claim, answer)
            # An answer that disabled the endpoint or opened its circuit stops the group's
            # other calls to it, as the mark of a call of its own would have refused them.
            if outcome.disabled:
                stopped[claim.endpoint_id] = ("not sent: the endpoint was disabled by an earlier "
                                              "answer", True)
            elif outcome.circuit_opened:
                stopped[claim.endpoint_id] = ("not sent: the endpoint's circuit opened", False)
        for why, cancel in sorted({(w, c) for _, w, c in unsent}):
            end_marked_unsent(self.slug, [c for c, w, k in unsent if (w, k) == (why, cancel)], why,
                              cancel=cancel)

    def _flush(self) -> None:
        done, self.held = self.held, []
        if done:
            recorded, _ = record_successes_and_mark(self.slug, done, [])
            for (claim, answer), result in zip(done, recorded, strict=True):
                self._log(claim, answer, result)

    def _record(self, claim: ClaimedWebhook, answer: CallAnswer) -> Recorded:
        recorded = record_answer(self.slug, claim, answer, jitter=random.random(),
                                 retry_base=timedelta(seconds=self.settings.webhook_retry_base_seconds))
        self._log(claim, answer, recorded)
        if recorded.retry_in is not None:
            # A wake-up only: the retry's time is in PostgreSQL, and the sweeper finds it too.
            deliver_webhooks.send_with_options(
                args=(self.slug, claim.delivery_id),
                delay=int(recorded.retry_in.total_seconds() * 1000) + WAKE_SLACK_MS)
        return recorded

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
