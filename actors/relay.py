"""The relay: from committed events to evaluated ones, fairly across tenants.

- ``relay_tenant(slug)`` claims a batch of the tenant's ready events (db/events/relay.py: status +
  lease + SKIP LOCKED, one batch in flight per tenant) and evaluates it in a second
  transaction (db/rules/evaluations.py): ledger claims per (rule, event), the trace, the events
  marked evaluated; after commit the claims are prepared at once when their product's
  preparation queue is idle, else sent to it (actors/prepare.py prepare_or_send). It
  takes up to BATCHES_PER_TURN batches, then wakes itself again behind the other tenants.
  A worker that dies between the two transactions leaves the batch leased: the lease runs
  out and a later pass claims it again; a second delivery of the message claims nothing.
- ``relay_tick()`` is the polling fallback, sent by the clock every EVENTS_POLL_SECONDS: it
  finds the tenants with ready events and wakes each once, starting after the tenant the
  previous tick started with (a rotating cursor), so no tenant waits behind the others.

A commit that records events wakes the relay at once: the events API's after its commit
(the WakeRelay effect, tocsin/boot/effects.py), a host's through PostgreSQL's notification, which the
clock's listener turns into the same message (``wake_for_host_commits``); that message is
only a wake-up — losing it delays an event by one polling interval, never drops
it. Per tenant, a circuit breaker stops a tenant whose processing keeps failing (a broken
schema) from being retried on every pass, and probes it again after a pause; the other
tenants never wait for it. A Redis lock per tenant, held from the claim to the evaluation's
commit, keeps two relays off the same tenant at once; the relay that finds it taken asks
the holder for one more pass instead of waiting — an optimisation only: the database's SKIP
LOCKED, the lease and the ledger's unique key are what make every case correct.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import dramatiq
import pybreaker
import redis

from actors.prepare import prepare_or_send
from db.events.ready_events import ready_tenants
from db.events.relay import claim_events, release_batch, tenants_with_ready_events
from db.platform.effects import PrepareClaims
from db.platform.tenancy import list_tenants, tenant_tx
from db.rules.evaluations import evaluate_claimed
from tocsin.core import runtime
from tocsin.core.settings import Settings
from tocsin.monitoring.metrics import RELAY_BREAKERS_OPEN, RELAY_EVENTS, RELAY_LAG

__all__ = [
    "BATCHES_PER_TURN",
    "Coordination",
    "T",
    "breaker",
    "coordination",
    "evaluate_batch",
    "pausing",
    "relay_tenant",
    "relay_tick",
    "wake",
    "wake_for_host_commits",
]

log = logging.getLogger("tocsin.relay")

T = TypeVar("T")


class Coordination:
    """The Redis keys the relay uses as optimisations, under the broker's namespace."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self._redis = client
        self._ns = namespace
        self._acquire = client.register_script(self._ACQUIRE)  # sent by digest (EVALSHA)
        self._release = client.register_script(self._RELEASE)

    def request_wake(self, slug: str) -> bool:
        """True when no wake-up of this tenant is already waiting in the queue (the caller
        sends one). The relay clears the flag when it starts, so an event committed after
        that start always gets a wake-up of its own."""
        return bool(self._redis.set(f"{self._ns}:relay:wake:{slug}", "1", nx=True, ex=30))

    _ACQUIRE = (Path(__file__).parent / "relay_acquire.lua").read_text()  # Lua, run in Redis
    _RELEASE = (Path(__file__).parent / "relay_release.lua").read_text()  # Lua, run in Redis

    def acquire(self, slug: str, seconds: int) -> str | None:
        """The tenant's lock for ``seconds``, or None while another relay holds it (which
        is then told to look again before it lets go: nothing committed meanwhile waits
        for the polling fallback)."""
        token = uuid.uuid4().hex
        keys = [f"{self._ns}:relay:wake:{slug}", f"{self._ns}:relay:lock:{slug}",
                f"{self._ns}:relay:again:{slug}"]
        return token if self._acquire(keys=keys, args=[token, seconds]) == 1 else None

    def release(self, slug: str, token: str) -> bool:
        """Let go of the lock; True when another relay asked for another pass meanwhile."""
        again = self._release(keys=[f"{self._ns}:relay:lock:{slug}", f"{self._ns}:relay:again:{slug}"],
                              args=[token])
        return again is not None

    def cursor(self) -> str | None:
        value = self._redis.get(f"{self._ns}:relay:cursor")
        return value.decode() if isinstance(value, bytes) else None

    def set_cursor(self, slug: str) -> None:
        self._redis.set(f"{self._ns}:relay:cursor", slug)


_lock = threading.RLock()
_coordination: tuple[Settings, Coordination] | None = None
_breakers: dict[str, pybreaker.CircuitBreaker] = {}
_open: dict[str, float] = {}  # tenants whose breaker is open in this process: since when (monotonic)


def coordination() -> Coordination:
    global _coordination
    settings = runtime.settings()
    with _lock:
        if _coordination is None or _coordination[0] is not settings:
            client = redis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=5)
            _coordination = (settings, Coordination(client, settings.dramatiq_namespace))
        return _coordination[1]


class _BreakerLog(pybreaker.CircuitBreakerListener):
    def state_change(self, cb: pybreaker.CircuitBreaker, old_state: object, new_state: object) -> None:
        state = getattr(new_state, "name", str(new_state))
        log.warning("breaker tenant=%s %s -> %s", cb.name, getattr(old_state, "name", old_state), state)
        with _lock:
            if state == pybreaker.STATE_OPEN:
                _open[str(cb.name)] = time.monotonic()
            else:
                _open.pop(str(cb.name), None)
            RELAY_BREAKERS_OPEN.set(len(_open))


def breaker(slug: str) -> pybreaker.CircuitBreaker:
    settings = runtime.settings()
    with _lock:
        found = _breakers.get(slug)
        if found is None:
            found = pybreaker.CircuitBreaker(
                fail_max=settings.relay_breaker_failures,
                reset_timeout=settings.relay_breaker_reset_seconds,
                name=slug, listeners=[_BreakerLog()],
            )
            _breakers[slug] = found
        return found


def pausing(slug: str) -> bool:
    """The tenant's breaker is open and its pause has not run out: claim nothing for it.
    (The claim itself is not a breaker call: a claim that works says nothing about whether
    the tenant's evaluation does, and counting it as a success would keep the breaker shut
    for a tenant whose every evaluation fails.)"""
    with _lock:
        since = _open.get(slug)
    return since is not None and time.monotonic() - since < runtime.settings().relay_breaker_reset_seconds


def _guarded(slug: str, work: Callable[[], T]) -> T | None:
    """Run ``work`` behind the tenant's breaker; None when the breaker is open."""
    try:
        return breaker(slug).call(work)
    except pybreaker.CircuitBreakerError:
        log.info("tenant=%s skipped: its breaker is open (probed again later)", slug)
        return None


def wake(slug: str) -> None:
    """Send one relay wake-up for the tenant unless one is already waiting."""
    if coordination().request_wake(slug):
        relay_tenant.send(slug)


def wake_for_host_commits(stop: threading.Event) -> None:
    """Until ``stop`` is set: wake the relay for every tenant whose host committed events
    through tocsin.shell.outbox.record_event (its notification arrives only once the host's
    transaction has committed). Run by the clock, one listener per clock; two clocks only
    send a wake-up twice, which the wake-up flag folds into one message."""
    settings = runtime.settings()
    # A session of its own: DATABASE_LISTEN_URL when DATABASE_URL goes through PgBouncer.
    ready_tenants(settings.database_listen_url or settings.database_url, wake, stop,
                  retry_seconds=settings.events_listen_retry_seconds,
                  on_listening=lambda: log.info("listening for events committed by hosts"))


BATCHES_PER_TURN = 2  # a tenant's batches in one relay message before the others get a turn


@dramatiq.actor(queue_name="relay", time_limit=5 * 60_000, max_age=10 * 60_000)  # milliseconds
def relay_tenant(slug: str) -> None:
    """Claim a batch of the tenant's ready events and evaluate it, up to BATCHES_PER_TURN
    times; a tenant with more waiting is woken again at the back of the queue, behind the
    other tenants' messages. Delivered twice, the second run finds nothing to claim.

    The tenant's Redis lock is held from the claim to the evaluation's commit. A relay that
    finds it taken leaves at once and asks the holder to claim once more before letting go,
    so an event committed while a batch was being evaluated is claimed by the pass that
    follows it, not by the next poll."""
    settings = runtime.settings()
    coord = coordination()
    for turn in range(BATCHES_PER_TURN):
        token = coord.acquire(slug, settings.relay_lease_seconds)
        if token is None:
            return  # its holder claims again before it lets go
        if pausing(slug):
            coord.release(slug, token)
            log.info("tenant=%s skipped: its breaker is open (probed again later)", slug)
            return
        claims: list[tuple[str, int]] = []
        ids: list[int] = []
        try:
            ids = _claim(slug)
            done = bool(ids) and evaluate_batch(slug, ids, claims)
        finally:
            again = coord.release(slug, token)
        _hand_over(slug, claims)
        if not done and not (again and ids == []):
            return
        if len(ids) < settings.relay_batch and not again:
            # Nothing more was ready when it claimed, and no wake-up came meanwhile (what
            # commits from now on sends one of its own: the flag was cleared above).
            return
        if turn == BATCHES_PER_TURN - 1:
            wake(slug)  # more may wait: its next turn


def _claim(slug: str) -> list[int]:
    settings = runtime.settings()
    with tenant_tx(slug, generic_plans=True, redoable=True) as tx:
        batch = claim_events(tx, limit=settings.relay_batch,
                             lease_seconds=settings.relay_lease_seconds,
                             max_attempts=settings.relay_max_attempts)
    if batch.failed:
        log.error("tenant=%s %d event(s) failed after %d attempts", slug, batch.failed,
                  settings.relay_max_attempts)
    return batch.event_ids


def _hand_over(slug: str, claims: list[tuple[str, int]]) -> None:
    """The committed evaluation's claims, prepared at once or sent to their queues."""
    if not claims:
        return
    try:
        prepare_or_send(slug, claims)
    except Exception:
        # Evaluated and committed: a broker that cannot be reached now only delays the
        # claims until the sweeper finds them unprepared, as a lost message would.
        log.exception("tenant=%s could not hand over %d claim(s) (the sweeper will)", slug, len(claims))


def evaluate_batch(slug: str, event_ids: list[int], claims: list[tuple[str, int]] | None = None) -> bool:
    """Evaluate a claimed batch in one tenant transaction, behind the tenant's breaker; the
    new claims go to their preparation queues once it commits, or into ``claims`` when the
    caller hands them over itself. False when it was not
    evaluated: the breaker is open (the lease runs out and a later pass claims the batch
    again) or it failed (handed back at once, in a fresh transaction: the failed one is
    poisoned; the attempts bound it)."""

    def evaluate() -> int:
        with tenant_tx(slug, generic_plans=True, redoable=True) as tx:
            report = evaluate_claimed(tx, event_ids)
            if claims is not None:  # the caller's, once committed; no preparation messages
                taken = tx.take(PrepareClaims)
                if taken is not None:
                    tx.after_commit(partial(claims.extend, taken.claims))
        for lag in report.lags:
            RELAY_LAG.observe(lag)
        for event_id, error in sorted(report.failed.items()):
            # Failed alone (its data, not the tenant's machinery): the batch committed without it.
            log.error("tenant=%s event=%d could not be evaluated (failed, the rest of its batch "
                      "went on): %s", slug, event_id, error)
        return report.evaluated

    try:
        evaluated = _guarded(slug, evaluate)
    except Exception as error:
        log.exception("tenant=%s evaluation of %d event(s) failed", slug, len(event_ids))
        try:
            with tenant_tx(slug) as tx:
                release_batch(tx, event_ids, f"{type(error).__name__}: {error}")
        except Exception:
            log.exception("tenant=%s could not release the batch (its lease will run out)", slug)
        return False
    if evaluated is None:
        return False
    RELAY_EVENTS.inc(evaluated)
    return True


@dramatiq.actor(queue_name="relay", time_limit=60_000, max_age=60_000)  # milliseconds
def relay_tick() -> None:
    """The polling fallback: wake every tenant whose outbox holds a ready event."""
    tenants = list_tenants(active_only=True)
    coord = coordination()
    start = coord.cursor()
    slugs = [t.slug for t in tenants]
    if start in slugs:  # rotate: begin just after the tenant the last tick began with
        i = slugs.index(start) + 1
        tenants = tenants[i:] + tenants[:i]
    ready = tenants_with_ready_events(tenants)
    for slug in ready:
        wake(slug)
    if tenants:
        coord.set_cursor(tenants[0].slug)
    # Said when it found work; otherwise quietly (the clock says once a minute that it ticks).
    (log.info if ready else log.debug)("relay tick: %d of %d tenant(s) had events waiting",
                                       len(ready), len(slugs))
