"""What a tenant transaction asks for once it has committed, and who carries it out.

A use case in db/ never calls the outside world while its transaction is open: it records
an effect with ``tx.after_commit(effect)`` and the transaction (db/platform/tenancy.py) runs
the effects once its COMMIT has returned, never after a rollback. An effect is either a
plain callable (this process's own bookkeeping) or one of the data effects below, which name
rows already durable. The process's bootstrap (tocsin/boot/effects.py) says how each kind of
data effect is carried out (a broker message, a Redis publish, an SNS call); a process that
registered nothing for a kind (the CLI's migrate, a test) leaves the rows to the sweeper,
which finds them in PostgreSQL: an effect is a wake-up, never the only record of the work.

The data effects of one transaction are merged by kind before they run, so a scan that
schedules 300 emails hands them over in one batch, not 300.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Self, TypeVar

__all__ = [
    "AnnounceInbox",
    "Collected",
    "Effect",
    "PrepareClaims",
    "PublishAlerts",
    "SendChats",
    "SendCheckpointEmails",
    "SendEmails",
    "SendSms",
    "SendWebhooks",
    "WakeRelay",
    "carry_out",
    "handle",
    "handler_of",
    "merged",
    "stop_handling",
]

log = logging.getLogger(__name__)


class Collected:
    """A data effect: the effects of one kind in a transaction are merged into one."""

    def absorb(self, other: Self) -> None:
        """Add ``other``'s content to this one (in place)."""
        raise NotImplementedError


@dataclass
class SendEmails(Collected):
    """Email deliveries marked enqueued in the transaction, for the email workers."""

    delivery_ids: list[int] = field(default_factory=list)

    def absorb(self, other: SendEmails) -> None:
        self.delivery_ids.extend(other.delivery_ids)


@dataclass
class AnnounceInbox(Collected):
    """Users given a visible inbox notification, for the live push to name."""

    user_ids: set[int] = field(default_factory=set)

    def absorb(self, other: AnnounceInbox) -> None:
        self.user_ids.update(other.user_ids)


@dataclass
class WakeRelay(Collected):
    """Events written to the outbox, for the relay's wake-up (its polling finds them anyway)."""

    event_ids: list[int] = field(default_factory=list)

    def absorb(self, other: WakeRelay) -> None:
        self.event_ids.extend(other.event_ids)


@dataclass
class PrepareClaims(Collected):
    """Rule claims to prepare, as (product, ledger id), for the per-product preparation queues."""

    claims: list[tuple[str, int]] = field(default_factory=list)

    def absorb(self, other: PrepareClaims) -> None:
        self.claims.extend(other.claims)


@dataclass
class PublishAlerts(Collected):
    """Ops alerts wait to be published to the ops topic (db/delivery/alerts.py holds them)."""

    def absorb(self, other: PublishAlerts) -> None:
        pass


@dataclass
class SendSms(Collected):
    """SMS deliveries marked enqueued in the transaction, for the SMS workers."""

    delivery_ids: list[int] = field(default_factory=list)

    def absorb(self, other: SendSms) -> None:
        self.delivery_ids.extend(other.delivery_ids)


@dataclass
class SendWebhooks(Collected):
    """Webhook deliveries due now, for the webhook workers (actors/webhooks.py)."""

    delivery_ids: list[int] = field(default_factory=list)

    def absorb(self, other: SendWebhooks) -> None:
        self.delivery_ids.extend(other.delivery_ids)


@dataclass
class SendCheckpointEmails(Collected):
    """Signed checkpoints whose copy waits to be emailed to the compliance address
    (evidence_checkpoint_emails holds them; actors/evidence.py sends them)."""

    checkpoint_ids: list[int] = field(default_factory=list)

    def absorb(self, other: SendCheckpointEmails) -> None:
        self.checkpoint_ids.extend(other.checkpoint_ids)


@dataclass
class SendChats(Collected):
    """Slack and Teams deliveries due now, for the chat workers (actors/chat.py)."""

    delivery_ids: list[int] = field(default_factory=list)

    def absorb(self, other: SendChats) -> None:
        self.delivery_ids.extend(other.delivery_ids)


Effect = Collected | Callable[[], None]
C = TypeVar("C", bound=Collected)
Handler = Callable[[str, Any], None]  # (tenant slug, the merged effect)

_handlers: dict[type[Collected], Handler] = {}


def handle(kind: type[C], handler: Callable[[str, C], None]) -> None:
    """This process carries out effects of ``kind`` with ``handler`` (its bootstrap's call)."""
    _handlers[kind] = handler


def stop_handling(kind: type[Collected]) -> None:
    """This process no longer carries out ``kind`` (a test standing for a process without it)."""
    _handlers.pop(kind, None)


def handler_of(kind: type[Collected]) -> Handler | None:
    return _handlers.get(kind)


def merged(effects: Iterable[Effect], kind: type[C]) -> C | None:
    """The effects of ``kind`` among ``effects``, merged into one (None when there are none)."""
    result: C | None = None
    for effect in effects:
        if isinstance(effect, kind):
            if result is None:
                result = kind()  # a fresh one: the effects asked for stay as they were
            result.absorb(effect)
    return result


def carry_out(slug: str, effects: list[Effect]) -> None:
    """Run a committed transaction's effects: plain callables in the order they were
    registered, then each kind of data effect once, merged. One that raises is logged with
    its tenant and does not stop the others: the transaction has committed and its rows are
    durable, so a failed wake-up (Redis down) only waits for the sweeper's next pass."""
    kinds: list[type[Collected]] = []
    for effect in effects:
        if isinstance(effect, Collected):
            if type(effect) not in kinds:
                kinds.append(type(effect))
            continue
        _safely(slug, getattr(effect, "__qualname__", repr(effect)), effect)
    for kind in kinds:
        handler = _handlers.get(kind)
        one = merged(effects, kind)
        if handler is not None and one is not None:
            _safely(slug, kind.__name__, partial(handler, slug, one))


def _safely(slug: str, name: str, run: Callable[[], None]) -> None:
    try:
        run()
    except Exception:
        log.exception("after-commit effect %s failed tenant=%s (the sweeper will catch up)", name, slug)
