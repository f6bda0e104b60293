"""Tenant API keys for the events API: created (the key is shown once), listed, revoked,
and recognised. Only a key's SHA-256 is stored: the key is 32 random bytes, so a fast hash
is enough (no password stretching needed) and a leaked table gives no usable key."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from db.evidence.audit import record_audit
from db.platform.pool import connection
from db.platform.tenancy import get_tenant, not_migrated_is_an_error, tenant_tx
from domain.errors import NotFound
from domain.people.identity import valid_name, valid_slug

__all__ = [
    "KEY_BYTES",
    "KEY_PREFIX",
    "SHOWN_CHARS",
    "USE_RECORDED_EVERY",
    "ApiKey",
    "CallerKey",
    "create_api_key",
    "key_hash",
    "list_api_keys",
    "recognise_key",
    "revoke_api_key",
]

KEY_PREFIX = "tsk_"  # every Tocsin key starts so: secret scanners and people can spot one
KEY_BYTES = 32  # of randomness in a key
SHOWN_CHARS = 12  # first characters of a key kept to tell keys apart in a list
USE_RECORDED_EVERY = 60  # seconds: last_used_at is written at most this often per key


@dataclass(frozen=True)
class ApiKey:
    id: int
    tenant_slug: str
    label: str
    prefix: str  # the key's first characters, e.g. "tsk_AbC12xYz"
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


@dataclass(frozen=True)
class CallerKey:
    """The key a request presented: it alone decides the tenant the request acts for."""

    id: int
    tenant_slug: str


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_api_key(tenant_slug: str, label: str, *, published: str | None = None) -> tuple[ApiKey, str]:
    """A new key for the tenant: its record, and the key itself (shown once, never stored).
    ``published`` is the demo's only: a key printed in the README, like the demo password."""
    label = valid_name(label, "key label")
    key = published or KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)
    # In the tenant's transaction, so that the audit row commits with the key.
    with tenant_tx(valid_slug(tenant_slug)) as tx:
        tenant = tx.tenant
        row = tx.conn.execute(
            "INSERT INTO control.api_keys (tenant_id, label, key_hash, prefix) VALUES (%s, %s, %s, %s) "
            "RETURNING id, created_at",
            [tenant.id, label, key_hash(key), key[:SHOWN_CHARS]],
        ).fetchone()
        assert row is not None
        record_audit(tx, "api_key.create", "api_key", row[0],
                     after={"label": label, "prefix": key[:SHOWN_CHARS]})
    return ApiKey(int(str(row[0])), tenant.slug, label, key[:SHOWN_CHARS], row[1], None, None), key  # type: ignore[arg-type]


def list_api_keys(tenant_slug: str) -> list[ApiKey]:
    slug = get_tenant(valid_slug(tenant_slug)).slug
    with connection() as conn:
        rows = conn.execute(
            "SELECT k.id, k.label, k.prefix, k.created_at, k.last_used_at, k.revoked_at "
            "FROM control.api_keys k JOIN control.tenants t ON t.id = k.tenant_id "
            "WHERE t.slug = %s ORDER BY k.created_at, k.id", [slug]).fetchall()
    return [ApiKey(int(str(r[0])), slug, str(r[1]), str(r[2]), r[3], r[4], r[5])  # type: ignore[arg-type]
            for r in rows]


def revoke_api_key(tenant_slug: str, key_id: int) -> ApiKey:
    """Revoke one of the tenant's keys (from its next request on). Revoking a revoked key
    changes nothing; a key of another tenant is not found."""
    with tenant_tx(valid_slug(tenant_slug)) as tx:
        slug = tx.tenant.slug
        row = tx.conn.execute(
            "WITH before AS (SELECT id, revoked_at FROM control.api_keys "
            "                WHERE id = %s AND tenant_id = %s FOR UPDATE) "
            "UPDATE control.api_keys k SET revoked_at = coalesce(k.revoked_at, now()) "
            "FROM before b WHERE k.id = b.id "
            "RETURNING k.id, k.label, k.prefix, k.created_at, k.last_used_at, k.revoked_at, "
            "b.revoked_at IS NOT NULL",
            [key_id, tx.tenant.id]).fetchone()
        if row is None:
            raise NotFound(f"tenant {slug!r} has no API key {key_id}")
        if not row[6]:  # revoking a revoked key changes nothing, and is not recorded again
            record_audit(tx, "api_key.revoke", "api_key", key_id,
                         before={"label": row[1], "revoked": False}, after={"revoked": True})
    return ApiKey(int(str(row[0])), slug, str(row[1]), str(row[2]), row[3], row[4], row[5])  # type: ignore[arg-type]


def recognise_key(key: str) -> CallerKey | None:
    """The live key (not revoked, its tenant active) this text is, or None. Notes when it
    was used, at most once a minute, in the same round trip."""
    if not key.startswith(KEY_PREFIX) or len(key) > 200:
        return None  # not worth a query
    with connection() as conn, not_migrated_is_an_error():
        row = conn.execute(
            """
            WITH k AS (
                SELECT k.id, t.slug, k.last_used_at
                FROM control.api_keys k JOIN control.tenants t ON t.id = k.tenant_id
                WHERE k.key_hash = %(hash)s AND k.revoked_at IS NULL AND t.status = 'active'
            ), used AS (
                UPDATE control.api_keys SET last_used_at = now()
                WHERE id = (SELECT id FROM k)
                  AND (last_used_at IS NULL
                       OR last_used_at < now() - make_interval(secs => %(every)s))
            )
            SELECT id, slug FROM k
            """, {"hash": key_hash(key), "every": USE_RECORDED_EVERY}).fetchone()
    return None if row is None else CallerKey(int(str(row[0])), str(row[1]))

