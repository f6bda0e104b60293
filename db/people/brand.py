"""The tenant's brand (one row, tenant_brand): its settings and its logo, checked by
domain.people.brand before anything is written. The emails read it at send time
(db/delivery/email_context.py)."""

from __future__ import annotations

import hashlib

from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx
from domain.errors import InvalidInput
from domain.people.brand import Logo, check_colour, check_logo
from domain.people.locales import valid_locale

__all__ = ["read_logo", "save_brand", "save_logo"]

_MAX_TEXT = 500  # characters of a footer, a name or an address


def save_brand(tx: TenantTx, user_id: int, *, display_name: str, colour: str, footer: str,
               sender_name: str = "", reply_to: str = "", default_locale: str | None = None) -> None:
    """Replace the brand's settings (the logo stays); InvalidInput names what is wrong."""
    colour = check_colour(colour)
    for label, value in (("display name", display_name), ("footer", footer),
                         ("sender name", sender_name), ("reply-to", reply_to)):
        if len(value) > _MAX_TEXT:
            raise InvalidInput(f"the {label} is longer than {_MAX_TEXT} characters")
    if reply_to and "@" not in reply_to:
        raise InvalidInput(f"the reply-to {reply_to!r} is not an email address")
    before = tx.conn.execute(
        "SELECT display_name, colour, footer, sender_name, reply_to, default_locale FROM tenant_brand"
    ).fetchone()
    tx.conn.execute(
        """
        INSERT INTO tenant_brand (display_name, colour, footer, sender_name, reply_to, default_locale,
                                  updated_by)
        VALUES (%(name)s, %(colour)s, %(footer)s, %(sender)s, %(reply)s, %(locale)s, %(by)s)
        ON CONFLICT (only_row) DO UPDATE SET display_name = excluded.display_name,
            colour = excluded.colour, footer = excluded.footer, sender_name = excluded.sender_name,
            reply_to = excluded.reply_to, default_locale = excluded.default_locale,
            updated_by = excluded.updated_by, updated_at = now()
        """,
        {"name": display_name.strip(), "colour": colour, "footer": footer.strip(),
         "sender": sender_name.strip(), "reply": reply_to.strip(),
         "locale": None if default_locale is None else valid_locale(default_locale), "by": user_id},
    )
    fields = ("display_name", "colour", "footer", "sender_name", "reply_to", "default_locale")
    after = tx.conn.execute(f"SELECT {', '.join(fields)} FROM tenant_brand").fetchone()
    record_audit(tx, "settings.brand", "brand", None,
                 before=None if before is None else dict(zip(fields, before, strict=True)),
                 after=None if after is None else dict(zip(fields, after, strict=True)))


def save_logo(tx: TenantTx, user_id: int, data: bytes, declared_type: str) -> str:
    """Store the logo after checking it from its bytes; answers its SHA-256 digest (hex), which
    names it in the URL emails reference, so a new logo is a new URL and a cached one never
    goes stale."""
    logo = check_logo(data, declared_type)
    digest = hashlib.sha256(logo.data).hexdigest()
    tx.conn.execute(
        """
        INSERT INTO tenant_brand (logo, logo_type, logo_sha256, updated_by)
        VALUES (%(data)s, %(type)s, %(digest)s, %(by)s)
        ON CONFLICT (only_row) DO UPDATE SET logo = excluded.logo, logo_type = excluded.logo_type,
            logo_sha256 = excluded.logo_sha256, updated_by = excluded.updated_by, updated_at = now()
        """,
        {"data": logo.data, "type": logo.content_type, "digest": digest, "by": user_id},
    )
    record_audit(tx, "settings.brand_logo", "brand", None,
                 after={"type": logo.content_type, "sha256": digest, "bytes": len(logo.data)})
    return digest


def read_logo(tx: TenantTx, digest_prefix: str) -> Logo | None:
    """The tenant's logo if its digest starts with ``digest_prefix`` (16 hex characters, as
    emails name it); None for an older logo or none."""
    if len(digest_prefix) != 16 or not all(c in "0123456789abcdef" for c in digest_prefix):
        return None
    row = tx.conn.execute(
        "SELECT logo_type, logo FROM tenant_brand WHERE left(logo_sha256, 16) = %s",
        [digest_prefix]).fetchone()
    if row is None:
        return None
    data = row[1]
    assert isinstance(data, bytes | memoryview)
    return Logo(str(row[0]), bytes(data))
