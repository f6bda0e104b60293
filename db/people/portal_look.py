"""How the portal looks to one signed-in person, read with them on every request: the language
they read (theirs, else their client's, else the tenant's, else English), their time zone
(theirs, else their client's, else the tenant's) and the tenant's brand for the header."""

from __future__ import annotations

from dataclasses import dataclass

from db.platform.tenancy import TenantTx
from domain.delivery.email_content import DEFAULT_COLOUR
from domain.people.locales import resolve_locale

__all__ = ["PortalLook", "read_portal_look"]


@dataclass(frozen=True)
class PortalLook:
    locale: str  # a shipped locale: "en", "de", "fr"
    zone: str  # an IANA zone name
    brand_name: str  # the brand's display name, else the tenant's name
    colour: str  # "#rrggbb", AA on white (checked where it was saved)
    logo_path: str | None  # the logo's portal path, cached for good; None without a logo

    @property
    def custom_colour(self) -> str | None:
        """The brand's colour as six hex digits when it is not Tocsin's own."""
        return None if self.colour.lower() == DEFAULT_COLOUR else self.colour[1:].lower()


_LOOK = """
SELECT u.locale, c.locale, b.default_locale, coalesce(u.time_zone, c.time_zone),
       b.display_name, b.colour, left(b.logo_sha256, 16)
FROM users u
LEFT JOIN clients c ON c.id = u.client_id
LEFT JOIN tenant_brand b ON true
WHERE u.id = %s
"""


def read_portal_look(tx: TenantTx, user_id: int) -> PortalLook:
    row = tx.conn.execute(_LOOK, [user_id]).fetchone()
    user_locale, client_locale, tenant_locale, zone, name, colour, logo = (
        (None,) * 7 if row is None else tuple(None if v is None else str(v) for v in row))
    return PortalLook(
        locale=resolve_locale(user_locale, client_locale, tenant_locale),
        zone=zone or tx.tenant.time_zone,
        brand_name=name or tx.tenant.name,
        colour=colour or DEFAULT_COLOUR,
        logo_path=None if logo is None else f"/brand/{tx.tenant.slug}/logo/{logo}",
    )
