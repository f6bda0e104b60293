"""Sign-in throttling: password attempts are counted in Redis per account and per address in
fixed windows, and counted *before* any password is checked, in one atomic step with the
check (a Lua script): concurrent guesses cannot all pass a check made before any of them
was counted. Password checks (argon2, 64 MiB each) also have a budget per process.

Redis is for speed here, not correctness: a flushed Redis only forgets recent attempts.
Account keys are hashed, so Redis never holds an email address.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from domain.errors import Busy

__all__ = [
    "ACCOUNT_FAILURES",
    "ADDRESS_FAILURES",
    "API_KEY_FAILURES",
    "API_KEY_FAILURE_WINDOW_SECONDS",
    "API_WINDOW_SECONDS",
    "PREFIX",
    "WINDOW_SECONDS",
    "ApiKeyFailures",
    "ApiKeyRateLimit",
    "LoginThrottle",
    "PasswordChecks",
    "Refusal",
    "account_key",
    "address_key",
]

ACCOUNT_FAILURES = 5  # password attempts per account per window before it is paused
ADDRESS_FAILURES = 20  # password attempts from one address per window (any accounts)
WINDOW_SECONDS = 15 * 60  # seconds each count lives, from its first attempt
PREFIX = "tocsin-login"

_RESERVE = (Path(__file__).parent / "ratelimit_reserve.lua").read_text()  # Lua, run in Redis

_REFUND = (Path(__file__).parent / "ratelimit_refund.lua").read_text()  # Lua, run in Redis


@dataclass(frozen=True)
class Refusal:
    retry_after: int  # seconds until sign-in is allowed again

    @property
    def minutes(self) -> int:
        return max(1, -(-self.retry_after // 60))


def account_key(organisation: str, email: str) -> str:
    who = f"{organisation.strip().lower()}\x00{email.strip().lower()}".encode()
    return f"{PREFIX}:account:{hashlib.sha256(who).hexdigest()}"


def address_key(address: str) -> str:
    return f"{PREFIX}:address:{address}"


class LoginThrottle:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._reserve = client.register_script(_RESERVE)
        self._refund = client.register_script(_REFUND)

    @classmethod
    def from_url(cls, url: str) -> LoginThrottle:
        return cls(redis.Redis.from_url(url))

    def reserve(self, organisation: str, email: str, address: str) -> Refusal | None:
        """Count this attempt against the account and the address, or say why it may not
        even be tried now (then nothing is counted). Call before any password work."""
        keys = [account_key(organisation, email), address_key(address)]
        wait = int(self._reserve(keys=keys, args=[ACCOUNT_FAILURES, ADDRESS_FAILURES, WINDOW_SECONDS]))
        return Refusal(wait) if wait > 0 else None

    def refund(self, organisation: str, email: str, address: str) -> None:
        """The attempt was counted but no password was checked (the process was too busy, or
        the database failed): it does not count against anyone."""
        self._refund(keys=[account_key(organisation, email), address_key(address)])

    def record_success(self, organisation: str, email: str, address: str) -> None:
        """A correct password clears the account's count and gives the address back this
        attempt (not its others: one good sign-in must not reset a spray across accounts)."""
        self._redis.delete(account_key(organisation, email))
        self._refund(keys=[address_key(address)])


class PasswordChecks:
    """At most ``at_once`` password checks (argon2, 64 MiB and most of a core each) run at
    once in this process; one more waits up to ``wait_seconds`` for a turn, then is told the
    portal is busy. A burst of sign-ins, honest or not, cannot exhaust the web process's
    memory or starve every other request of CPU."""

    def __init__(self, at_once: int, wait_seconds: float) -> None:
        self._turns = threading.BoundedSemaphore(at_once)
        self._wait_seconds = wait_seconds

    @contextmanager
    def turn(self) -> Iterator[None]:
        if not self._turns.acquire(timeout=self._wait_seconds):
            raise Busy(
                "signing in is busy right now; try again in a few seconds",
                retry_after=max(1, round(self._wait_seconds)), own_share=False,
            )
        try:
            yield
        finally:
            self._turns.release()


# KEYS: the key's and the tenant's counters for this window. ARGV: events asked for, the
# key's and the tenant's limits per window, the window in seconds. Counts the events against
# both and answers 0, or counts nothing and answers the seconds until the window that is
# full ends. Each window starts with its first request.
_SPEND = """
local wait = 0
for i, key in ipairs(KEYS) do
  local n = tonumber(redis.call('GET', key) or '0')
  if n + tonumber(ARGV[1]) > tonumber(ARGV[i + 1]) then
    local ttl = redis.call('TTL', key)
    if ttl < 1 then
      ttl = tonumber(ARGV[4])
    end
    wait = math.max(wait, ttl)
  end
end
if wait > 0 then
  return wait
end
for _, key in ipairs(KEYS) do
  if redis.call('INCRBY', key, ARGV[1]) == tonumber(ARGV[1]) then
    redis.call('EXPIRE', key, ARGV[4])
  end
end
return 0
"""

API_WINDOW_SECONDS = 60  # seconds of one rate-limit window of an API key and of a tenant


class ApiKeyRateLimit:
    """Events each API key may send per minute, and each tenant with all its keys together
    (a batch counts every event), counted in Redis in one atomic step, so every web process
    shares one count per key and per tenant: a tenant cannot take the intake every tenant
    shares by making more keys. A flushed Redis only forgets the current minute."""

    def __init__(self, client: redis.Redis, namespace: str, per_minute: int,
                 tenant_per_minute: int) -> None:
        self._spend = client.register_script(_SPEND)
        self._namespace = namespace
        self.per_minute = per_minute
        self.tenant_per_minute = tenant_per_minute

    @classmethod
    def from_url(cls, url: str, namespace: str, per_minute: int,
                 tenant_per_minute: int) -> ApiKeyRateLimit:
        return cls(redis.Redis.from_url(url), namespace, per_minute, tenant_per_minute)

    def spend(self, api_key_id: int, tenant_slug: str, events: int) -> None:
        """Count ``events`` against the key and its tenant, or raise Busy (429) saying which
        limit was reached and when to try again."""
        keys = [f"{self._namespace}:api-rate:{api_key_id}",
                f"{self._namespace}:api-rate-tenant:{tenant_slug}"]
        wait = int(self._spend(keys=keys, args=[events, self.per_minute, self.tenant_per_minute,
                                                API_WINDOW_SECONDS]))
        if wait > 0:
            raise Busy(f"this API key may send {self.per_minute} events a minute, and its "
                       f"organisation's keys {self.tenant_per_minute} together; try again in "
                       f"{wait} seconds", retry_after=wait, own_share=True)


API_KEY_FAILURES = 30  # wrong or revoked API keys one address may present per window
API_KEY_FAILURE_WINDOW_SECONDS = 15 * 60  # seconds each address's count lives, from its first failure

# KEYS[1]: the address's count of failed keys. ARGV: the limit, the window in seconds.
# Answers the seconds to wait when the address is over its limit, else 0 (nothing counted:
# only a failure is, by _FAIL).
_CHECK = """
if tonumber(redis.call('GET', KEYS[1]) or '0') >= tonumber(ARGV[1]) then
  local ttl = redis.call('TTL', KEYS[1])
  if ttl < 1 then
    redis.call('EXPIRE', KEYS[1], ARGV[2])
    ttl = tonumber(ARGV[2])
  end
  return ttl
end
return 0
"""
_FAIL = """
if redis.call('INCR', KEYS[1]) == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
end
return 0
"""


class ApiKeyFailures:
    """Wrong or revoked API keys, counted per client address in Redis: past
    API_KEY_FAILURES in a window the address is refused (429) before its key is even looked
    up, so guessing keys costs the database nothing and gets no answers. A right key clears
    nothing (a guesser that owns one key must not reset its count with it). Addresses as
    portal/client_address.py sees them (TRUSTED_PROXIES)."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self._check = client.register_script(_CHECK)
        self._fail = client.register_script(_FAIL)
        self._namespace = namespace

    @classmethod
    def from_url(cls, url: str, namespace: str) -> ApiKeyFailures:
        return cls(redis.Redis.from_url(url), namespace)

    def _key(self, address: str) -> str:
        return f"{self._namespace}:api-key-failures:{address}"

    def check(self, address: str) -> None:
        """Raise Busy (429) when this address presented too many wrong keys lately."""
        wait = int(self._check(keys=[self._key(address)],
                               args=[API_KEY_FAILURES, API_KEY_FAILURE_WINDOW_SECONDS]))
        if wait > 0:
            raise Busy(f"too many wrong API keys from this address; try again in {wait} seconds",
                       retry_after=wait, own_share=True)

    def record_failure(self, address: str) -> None:
        self._fail(keys=[self._key(address)], args=[API_KEY_FAILURE_WINDOW_SECONDS])
