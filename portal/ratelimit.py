"""Sign-in throttling in Redis: failed attempts are counted per account and per address in
fixed windows, and a sign-in is refused (before any password is checked) while either count
is at its limit.

Redis is for speed here, not correctness: a flushed Redis only forgets recent failures.
Account keys are hashed, so Redis never holds an email address.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import redis

ACCOUNT_FAILURES = 5  # failed sign-ins per account per window before it is paused
ADDRESS_FAILURES = 20  # failed sign-ins from one address per window (any accounts)
WINDOW_SECONDS = 15 * 60  # seconds each count lives, from its first failure
PREFIX = "tocsin-login"


@dataclass(frozen=True)
class Refusal:
    retry_after: int  # seconds until sign-in is allowed again

    @property
    def minutes(self) -> int:
        return max(1, -(-self.retry_after // 60))


def _account_key(organisation: str, email: str) -> str:
    who = f"{organisation.strip().lower()}\x00{email.strip().lower()}".encode()
    return f"{PREFIX}:account:{hashlib.sha256(who).hexdigest()}"


def _address_key(address: str) -> str:
    return f"{PREFIX}:address:{address}"


class LoginThrottle:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    @classmethod
    def from_url(cls, url: str) -> LoginThrottle:
        return cls(redis.Redis.from_url(url))

    def refusal(self, organisation: str, email: str, address: str) -> Refusal | None:
        """Why this sign-in may not even be tried now, or None."""
        keys = (_account_key(organisation, email), _address_key(address))
        pipe = self._redis.pipeline(transaction=False)
        for key in keys:
            pipe.get(key)
            pipe.ttl(key)
        account, account_ttl, by_address, address_ttl = pipe.execute()
        waits = [
            int(ttl) for count, ttl, limit in (
                (account, account_ttl, ACCOUNT_FAILURES), (by_address, address_ttl, ADDRESS_FAILURES)
            )
            if count is not None and int(count) >= limit
        ]
        return Refusal(max(max(waits), 1)) if waits else None

    def record_failure(self, organisation: str, email: str, address: str) -> None:
        pipe = self._redis.pipeline(transaction=True)
        for key in (_account_key(organisation, email), _address_key(address)):
            # The window starts at the first failure: SET NX creates the counter with its
            # expiry (EXPIRE ... NX would need Redis 7; the embedded Redis is 6.2).
            pipe.set(key, 0, ex=WINDOW_SECONDS, nx=True)
            pipe.incr(key)
        pipe.execute()

    def record_success(self, organisation: str, email: str) -> None:
        """A correct password clears the account's count (not the address's: one good login
        must not reset a spray across many accounts)."""
        self._redis.delete(_account_key(organisation, email))
