"""Who did something, for the audit log: the actor a change is recorded against, and the
values a before/after snapshot may hold.

Pure: the portal, the events API and the CLI build an Actor from what they know (the
signed-in user and the client address, the API key, the operating-system user) and
db/evidence/audit.py records it with the change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from enum import Enum, StrEnum

__all__ = [
    "ANONYMOUS",
    "AUDIT_CSV_HEADER",
    "LABEL_MAX_LENGTH",
    "SYSTEM",
    "Actor",
    "ActorKind",
    "AuditFilter",
    "snapshot",
]

LABEL_MAX_LENGTH = 320  # characters of an actor's label kept (an email's longest)


class ActorKind(StrEnum):
    USER = "user"  # a signed-in person (admin, member, client user)
    API_KEY = "api_key"  # a host product calling the events API
    CLI = "cli"  # an operator at the `tocsin` command
    SYSTEM = "system"  # the machinery itself (the demo seed, a scan)
    ANONYMOUS = "anonymous"  # nobody signed in yet (a refused sign-in)


@dataclass(frozen=True)
class Actor:
    kind: ActorKind
    label: str  # an email, a key's label and prefix, cli:<os user>
    user_id: int | None = None
    address: str | None = None  # the client address a web request came from

    @classmethod
    def user(cls, user_id: int, email: str, address: str | None) -> Actor:
        return cls(ActorKind.USER, email[:LABEL_MAX_LENGTH], user_id, address)

    def at(self, address: str | None) -> Actor:
        return Actor(self.kind, self.label, self.user_id, address)


SYSTEM = Actor(ActorKind.SYSTEM, "system")
ANONYMOUS = Actor(ActorKind.ANONYMOUS, "anonymous")


@dataclass(frozen=True)
class AuditFilter:
    """What the audit page and its CSV show: every field optional, all must hold."""

    action: str | None = None  # a prefix: "client" finds client.create, client.edit, ...
    actor: str | None = None  # part of the actor's label
    object_kind: str | None = None
    object_id: str | None = None
    since: date | None = None  # the tenant's local dates, inclusive
    until: date | None = None


AUDIT_CSV_HEADER = ("id", "occurred_at", "actor_kind", "actor", "client_address", "action",
                    "object_kind", "object_id", "before", "after")

Snapshot = Mapping[str, object]


def _plain(value: object) -> object:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Enum):
        return _plain(value.value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return str(value)


def snapshot(values: Snapshot | None) -> dict[str, object] | None:
    """Before/after values as plain JSON (dates as ISO text, enums as their value)."""
    if values is None:
        return None
    plain = _plain(values)
    assert isinstance(plain, dict)
    return plain
