"""A tenant's webhook endpoints: create, list with their health, rotate the signing secret,
enable and disable (db/delivery/webhook_deliveries.py sends to them)."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx
from domain.delivery.webhooks import (
    BREAKER_FAILURES,
    ROTATION_OVERLAP,
    WEBHOOK,
    WebhookStatus,
    valid_endpoint_url,
    valid_event_kinds,
)
from domain.errors import InvalidInput, NotFound
from tocsin.core.clock import utcnow

__all__ = [
    "Endpoint",
    "create_endpoint",
    "disable_endpoint",
    "enable_endpoint",
    "get_endpoint",
    "list_endpoints",
    "new_secret",
    "rotate_secret",
    "signing_secrets",
]

SECRET_BYTES = 32  # of HMAC key per endpoint (the spec asks for 24 to 64)
MAX_ENDPOINTS = 20  # per tenant: each event is sent to every subscribed one
MAX_DESCRIPTION = 200  # characters


@dataclass(frozen=True)
class Endpoint:
    id: int
    url: str
    description: str
    event_kinds: tuple[str, ...]
    enabled: bool
    secret: str
    previous_secret: str | None
    previous_secret_until: datetime | None
    consecutive_failures: int
    circuit_open_until: datetime | None
    failing_since: datetime | None
    disabled_at: datetime | None
    disabled_reason: str | None
    delivered_24h: int = 0
    failed_24h: int = 0
    last_delivered_at: datetime | None = None

    def health(self, now: datetime) -> str:
        """One word for the portal: disabled, open (calls wait), failing, or healthy."""
        if not self.enabled:
            return "disabled"
        if self.circuit_open_until is not None and self.circuit_open_until > now:
            return "open"
        if self.consecutive_failures:
            return "failing"
        return "healthy"

    @property
    def breaker_threshold(self) -> int:
        return BREAKER_FAILURES


def new_secret() -> str:
    """A signing secret as the Standard Webhooks spec writes it: whsec_ and base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def signing_secrets(secret: str, previous: str | None, previous_until: datetime | None,
                    now: datetime) -> list[str]:
    """The secrets a call is signed with: the current one, and during a rotation's overlap
    the previous one too (the receiver accepts either signature in the header)."""
    if previous and previous_until is not None and previous_until > now:
        return [secret, previous]
    return [secret]


_COLUMNS = """e.id, e.url, e.description, e.event_kinds, e.enabled, e.secret, e.previous_secret,
    e.previous_secret_until, e.consecutive_failures, e.circuit_open_until, e.failing_since,
    e.disabled_at, e.disabled_reason"""

_LIST = f"""
SELECT {_COLUMNS},
       (SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = e.id
          AND d.status = 'delivered' AND d.delivered_at > now() - interval '24 hours'),
       (SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = e.id
          AND d.status = 'failed' AND d.updated_at > now() - interval '24 hours'),
       (SELECT max(d.delivered_at) FROM webhook_deliveries d WHERE d.endpoint_id = e.id)
FROM webhook_endpoints e
"""


def _endpoint(row: tuple[object, ...]) -> Endpoint:
    r = list(row)
    return Endpoint(
        id=int(str(r[0])), url=str(r[1]), description=str(r[2]),
        event_kinds=tuple(r[3]) if isinstance(r[3], list) else (),
        enabled=bool(r[4]), secret=str(r[5]),
        previous_secret=None if r[6] is None else str(r[6]),
        previous_secret_until=r[7] if isinstance(r[7], datetime) else None,
        consecutive_failures=int(str(r[8])),
        circuit_open_until=r[9] if isinstance(r[9], datetime) else None,
        failing_since=r[10] if isinstance(r[10], datetime) else None,
        disabled_at=r[11] if isinstance(r[11], datetime) else None,
        disabled_reason=None if r[12] is None else str(r[12]),
        delivered_24h=int(str(r[13])) if len(r) > 13 else 0,
        failed_24h=int(str(r[14])) if len(r) > 14 else 0,
        last_delivered_at=r[15] if len(r) > 15 and isinstance(r[15], datetime) else None,
    )


def list_endpoints(tx: TenantTx) -> list[Endpoint]:
    return [_endpoint(r) for r in tx.conn.execute(_LIST + " ORDER BY e.id").fetchall()]


def get_endpoint(tx: TenantTx, endpoint_id: int) -> Endpoint:
    row = tx.conn.execute(_LIST + " WHERE e.id = %s", [endpoint_id]).fetchone()
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id}")
    return _endpoint(row)


def create_endpoint(tx: TenantTx, url: str, event_kinds: Iterable[str], *, description: str = "",
                    allow_private: bool) -> Endpoint:
    """A new enabled endpoint with a fresh secret. Bad input raises InvalidInput, before
    anything is written."""
    url = valid_endpoint_url(url, allow_private=allow_private)
    kinds = valid_event_kinds(event_kinds)
    description = " ".join(description.split())
    if any(ord(c) < 32 for c in description):
        raise InvalidInput("the description must not contain control characters")
    if len(description) > MAX_DESCRIPTION:
        raise InvalidInput(f"the description must have at most {MAX_DESCRIPTION} characters")
    row = tx.conn.execute("SELECT count(*) FROM webhook_endpoints").fetchone()
    if row is not None and int(str(row[0])) >= MAX_ENDPOINTS:
        raise InvalidInput(f"a tenant may have at most {MAX_ENDPOINTS} webhook endpoints")
    created = tx.conn.execute(
        "INSERT INTO webhook_endpoints (url, description, event_kinds, secret) "
        "VALUES (%s, %s, %s, %s) RETURNING id",
        [url, description, list(kinds), new_secret()]).fetchone()
    assert created is not None
    endpoint = get_endpoint(tx, int(str(created[0])))
    record_audit(tx, "webhook.create", "webhook_endpoint", endpoint.id, after=_audited(endpoint))
    return endpoint


def _audited(endpoint: Endpoint) -> dict[str, object]:
    """What the audit log keeps of an endpoint: never a secret."""
    return {"url": endpoint.url, "event_kinds": list(endpoint.event_kinds), "enabled": endpoint.enabled}


def rotate_secret(tx: TenantTx, endpoint_id: int, now: datetime | None = None) -> Endpoint:
    """A new secret signs from now on; the previous one signs beside it for ROTATION_OVERLAP,
    so a receiver that has not switched yet still verifies every call."""
    now = now or utcnow()
    row = tx.conn.execute(
        "UPDATE webhook_endpoints SET previous_secret = secret, previous_secret_until = %s, "
        "secret = %s, updated_at = now() WHERE id = %s RETURNING id",
        [now + ROTATION_OVERLAP, new_secret(), endpoint_id]).fetchone()
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id}")
    record_audit(tx, "webhook.rotate_secret", "webhook_endpoint", endpoint_id,
                 after={"previous_secret_valid_until": (now + ROTATION_OVERLAP).isoformat()})
    return get_endpoint(tx, endpoint_id)


def enable_endpoint(tx: TenantTx, endpoint_id: int) -> Endpoint:
    """Enabled again with a clean health record: the next call is a fresh start."""
    row = tx.conn.execute(
        "UPDATE webhook_endpoints SET enabled = true, consecutive_failures = 0, "
        "circuit_open_until = NULL, failing_since = NULL, disabled_at = NULL, "
        "disabled_reason = NULL, updated_at = now() WHERE id = %s RETURNING id",
        [endpoint_id]).fetchone()
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id}")
    record_audit(tx, "webhook.enable", "webhook_endpoint", endpoint_id, after={"enabled": True})
    return get_endpoint(tx, endpoint_id)


_TO_CANCELLED = WEBHOOK.where(to=WebhookStatus.CANCELLED, within=[WebhookStatus.PENDING])
_CANCEL_PENDING = f"""
UPDATE webhook_deliveries SET status = 'cancelled', status_reason = %(reason)s,
       claim_token = NULL, lease_until = NULL, updated_at = now()
WHERE endpoint_id = %(endpoint)s AND {_TO_CANCELLED}
"""


def disable_endpoint(tx: TenantTx, endpoint_id: int, reason: str) -> bool:
    """Disable an enabled endpoint and cancel what waits for it, with ``reason``; False when
    it was already disabled (nothing changes, so a disabling is noticed once)."""
    row = tx.conn.execute(
        "UPDATE webhook_endpoints SET enabled = false, disabled_at = now(), disabled_reason = %s, "
        "disabled_count = disabled_count + 1, circuit_open_until = NULL, updated_at = now() "
        "WHERE id = %s AND enabled RETURNING id", [reason, endpoint_id]).fetchone()
    if row is None:
        if tx.conn.execute("SELECT 1 FROM webhook_endpoints WHERE id = %s", [endpoint_id]).fetchone() is None:
            raise NotFound(f"no webhook endpoint {endpoint_id}")
        return False
    tx.conn.execute(_CANCEL_PENDING, {"endpoint": endpoint_id,
                                      "reason": f"endpoint disabled: {reason}"})
    record_audit(tx, "webhook.disable", "webhook_endpoint", endpoint_id,
                 before={"enabled": True}, after={"enabled": False, "reason": reason})
    return True
