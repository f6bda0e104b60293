"""deliver_chats: for a few Slack and Teams deliveries of one tenant, claim them (committed),
then for each: the SSRF guard's decision on the resolved address, a slot of the URL's rate
limit (Redis, shared by every worker), the call marked (committed), one POST of the Block
Kit message or Adaptive Card, its answer recorded, fenced by the claim's token.

The steps and what a crash leaves are described in db/delivery/chat_deliveries.py.
"""

from __future__ import annotations

import logging
import random
import time
from datetime import timedelta

import dramatiq

from db.delivery.chat_deliveries import ClaimedChat, claim_chats, mark_called, record_answer, release_unsent
from domain.delivery.channels import CHANNELS, Channel
from domain.delivery.chat import ChatMessage, message_body
from domain.delivery.states import ErrorClass
from domain.delivery.webhooks import CallAnswer, DestinationRefused
from tocsin.core import runtime
from tocsin.core.settings import Settings
from tocsin.providers.chat_http import get_chat_sender
from tocsin.providers.chat_rate import MAX_SLOT_WAIT_SECONDS, chat_limiter
from tocsin.providers.send_rate import RateLimited

__all__ = ["CHATS_PER_MESSAGE", "deliver_chats", "send_chats"]

# Ids, attempts, status codes and outcomes only: never message text or URLs (a credential).
log = logging.getLogger("tocsin.chat")

CHATS_PER_MESSAGE = 10  # deliveries of one tenant that one deliver_chats message carries
WAKE_SLACK_MS = 50  # milliseconds a retry's wake-up waits past its due time


# The time limit stays under the default lease (5 minutes), so a stuck worker gives its
# deliveries back before the sweeper may take them over.
@dramatiq.actor(queue_name="chat", time_limit=4 * 60_000, max_age=60 * 60_000)  # milliseconds
def deliver_chats(slug: str, *delivery_ids: int) -> None:
    """Post up to CHATS_PER_MESSAGE due chat messages of one tenant.

    Safe to run any number of times: only the run whose claim moved a delivery to sending
    posts it."""
    settings = runtime.settings()
    # A call starts only while half the lease is left (a slower one could still be going
    # when the sweeper takes the delivery back).
    start_until = time.monotonic() + settings.delivery_lease_seconds / 2
    claims = claim_chats(slug, sorted(set(delivery_ids)), settings.delivery_lease_seconds)
    n = 0
    try:
        for n, claim in enumerate(claims):
            if time.monotonic() > start_until:
                release_unsent(slug, claims[n:], "the lease was running out before the call")
                send_chats(slug, [c.delivery_id for c in claims[n:]])
                return
            _post(slug, settings, claim)
    except BaseException as error:  # a time limit or shutdown: what was not called goes back
        release_unsent(slug, claims[n + 1:], f"the worker stopped ({type(error).__name__})")
        raise


def _post(slug: str, settings: Settings, claim: ClaimedChat) -> None:
    sender = get_chat_sender(settings.webhook_allow_private, settings.webhook_timeout_seconds)
    channel = Channel(claim.channel)
    try:
        # The guard decides on the resolved addresses before any connection is attempted.
        call = sender.prepare(claim.url)
    except DestinationRefused as guard:
        _record(slug, settings, claim, CallAnswer(None, 0, None, str(guard), ErrorClass.TRANSIENT,
                                                  sent=False, refused=True))
        return
    rate = CHANNELS[channel].max_per_second
    if rate is not None:
        try:
            chat_limiter(claim.url, rate).acquire()
        except RateLimited:
            # The URL's queue is longer than a worker should sleep: back to pending, later.
            release_unsent(slug, [claim], "no rate-limit slot soon", after_seconds=MAX_SLOT_WAIT_SECONDS)
            deliver_chats.send_with_options(args=(slug, claim.delivery_id),
                                            delay=int(MAX_SLOT_WAIT_SECONDS * 1000) + WAKE_SLACK_MS)
            return
    if not mark_called(slug, claim):
        log.warning("chat tenant=%s id=%d attempt=%d not sent: the lease ran out before the call",
                    slug, claim.delivery_id, claim.attempt)
        return
    link = settings.portal_url.rstrip("/") + claim.href
    body = message_body(channel, ChatMessage(claim.title, claim.text, link, claim.critical))
    _record(slug, settings, claim, sender.send(call, body))


def _record(slug: str, settings: Settings, claim: ClaimedChat, answer: CallAnswer) -> None:
    recorded = record_answer(slug, claim, answer, jitter=random.random(),
                             retry_base=timedelta(seconds=settings.webhook_retry_base_seconds))
    log.info("chat tenant=%s id=%d channel=%s attempt=%d status=%s code=%s latency_ms=%d -> %s",
             slug, claim.delivery_id, claim.channel, claim.attempt,
             "ok" if answer.error_class is None else answer.error_class, answer.status_code,
             answer.latency_ms, recorded.status or "taken over")
    if recorded.retry_in is not None:
        # A wake-up only: the retry's time is in PostgreSQL, and the sweeper finds it too.
        deliver_chats.send_with_options(args=(slug, claim.delivery_id),
                                        delay=int(recorded.retry_in.total_seconds() * 1000) + WAKE_SLACK_MS)


def send_chats(slug: str, delivery_ids: list[int]) -> None:
    """Hand deliveries committed as due to the chat workers (the SendChats effect, wired by
    tocsin/boot/effects.py). A send that fails leaves them to the sweeper."""
    for start in range(0, len(delivery_ids), CHATS_PER_MESSAGE):
        deliver_chats.send(slug, *delivery_ids[start:start + CHATS_PER_MESSAGE])
