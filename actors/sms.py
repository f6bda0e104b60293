"""deliver_sms: for a few texts of one tenant, claim them (committed), then for each: ask SNS
whether the number opted out, mark the publish (committed, with its price reserved against
the month's cap), publish, record the answer, fenced by the claim's token.

The steps and what a crash leaves are described in db/delivery/sms_deliveries.py.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from decimal import Decimal

import dramatiq

from db.delivery.sms_deliveries import (
    ClaimedSms,
    claim_sms,
    mark_called,
    record_accepted,
    record_error,
    record_opted_out,
    record_provider_opt_outs,
)
from db.people.sms_settings import tenant_has_numbers
from db.platform.pool import retrying
from domain.delivery.states import ErrorClass
from tocsin.core import runtime
from tocsin.providers.ses import ProviderError
from tocsin.providers.sns_sms import get_sms_sender

__all__ = ["OPT_OUT_LIST_SECONDS", "SMS_PER_MESSAGE", "deliver_sms", "send_sms", "sync_provider_opt_outs"]

# Ids, attempts and outcomes only: never phone numbers or texts.
log = logging.getLogger("tocsin.sms")

SMS_PER_MESSAGE = 20  # texts of one tenant that one deliver_sms message carries
OPT_OUT_LIST_SECONDS = 600.0  # seconds a process keeps SNS's opt-out list before reading it again


# The time limit stays under the default lease (5 minutes): a stuck worker records its
# outcome before the sweeper may take its texts over.
@dramatiq.actor(queue_name="sms", time_limit=4 * 60_000, max_age=60 * 60_000)  # milliseconds
def deliver_sms(slug: str, *delivery_ids: int) -> None:
    """Send up to SMS_PER_MESSAGE due texts of one tenant. Safe to run any number of times:
    only the run whose claim moved a text to sending publishes it."""
    settings = runtime.settings()
    claims = claim_sms(slug, sorted(set(delivery_ids)), settings.delivery_lease_seconds,
                       settings.portal_url)
    price = Decimal(str(settings.sms_price_per_segment))
    cap = Decimal(str(settings.sms_monthly_spend_cap))
    for claim in claims:
        _send_one(slug, claim, price, cap)


def _send_one(slug: str, claim: ClaimedSms, price: Decimal, cap: Decimal) -> None:
    sender = get_sms_sender()
    try:
        opted_out = sender.opted_out(claim.phone)
    except ProviderError as error:
        _record(slug, claim, error.error_class if error.error_class is not ErrorClass.UNCERTAIN
                else ErrorClass.TRANSIENT, f"opt-out check: {error}")
        return
    if opted_out:
        retrying(lambda: record_opted_out(slug, claim))
        log.info("sms tenant=%s id=%d attempt=%d cancelled: opted out at the provider", slug,
                 claim.delivery_id, claim.attempt)
        return
    marked = retrying(lambda: mark_called(slug, claim, price, cap))
    if not marked.go:
        log.warning("sms tenant=%s id=%d attempt=%d not sent: %s", slug, claim.delivery_id,
                    claim.attempt, marked.refused)
        return
    try:
        accepted = sender.publish(claim.phone, claim.text)
    except ProviderError as error:
        _record(slug, claim, error.error_class, str(error))
        return
    except BaseException as stopped:  # a time limit or shutdown while the request was out
        _record(slug, claim, ErrorClass.UNCERTAIN, f"no answer ({type(stopped).__name__})")
        raise
    retrying(lambda: record_accepted(slug, claim, accepted.provider_message_id))
    log.info("sms tenant=%s id=%d attempt=%d accepted", slug, claim.delivery_id, claim.attempt)


def _record(slug: str, claim: ClaimedSms, error_class: ErrorClass, error: str) -> None:
    status = retrying(lambda: record_error(slug, claim, error_class, error, random.random()))
    log.warning("sms tenant=%s id=%d attempt=%d %s error: %s -> %s", slug, claim.delivery_id,
                claim.attempt, error_class.value, error, status.value)


def sync_provider_opt_outs(slug: str) -> int:
    """The sweeper's step: numbers SNS lists as opted out join the tenant's STOP list. The
    list is the account's, read at most once per OPT_OUT_LIST_SECONDS by each process; a
    failure to read it is logged and changes nothing (each publish still asks SNS first). A
    tenant where nobody gave a number has nothing to stop: SNS is not asked."""
    if not retrying(lambda: tenant_has_numbers(slug)):
        return 0
    numbers = _opt_out_list.get()
    return retrying(lambda: record_provider_opt_outs(slug, numbers)) if numbers else 0


class _OptOutList:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._numbers: frozenset[str] = frozenset()
        self._read_at = -OPT_OUT_LIST_SECONDS

    def get(self) -> frozenset[str]:
        with self._lock:
            if time.monotonic() - self._read_at >= OPT_OUT_LIST_SECONDS:
                self._read_at = time.monotonic()
                try:
                    self._numbers = get_sms_sender().opted_out_numbers()
                except ProviderError as error:
                    log.warning("sms: could not read SNS's opt-out list: %s", error)
            return self._numbers

    def forget(self) -> None:
        """Read the list again on next use (tests)."""
        with self._lock:
            self._read_at = -OPT_OUT_LIST_SECONDS


_opt_out_list = _OptOutList()


def send_sms(slug: str, delivery_ids: list[int]) -> None:
    """Hand texts committed as due to the SMS workers (the SendSms effect, wired by
    tocsin/boot/effects.py). A send that fails leaves them to the sweeper."""
    for start in range(0, len(delivery_ids), SMS_PER_MESSAGE):
        deliver_sms.send(slug, *delivery_ids[start:start + SMS_PER_MESSAGE])
