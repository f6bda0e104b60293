"""The tenant's logo, as emails reference it: by absolute URL, fetched by mail clients that
hold no session, so the route is public. It serves only the logo whose digest the URL names
(a new logo is a new URL), so it can be cached for good; an SVG is sent with a policy that
lets it run nothing and load nothing, on top of the checks made when it was stored."""

from __future__ import annotations

from litestar import get
from litestar.params import FromPath
from litestar.response import Response

from db.people.brand import read_logo
from db.platform.tenancy import tenant_tx
from domain.errors import InvalidInput, NotFound
from domain.people.brand import portal_theme
from portal.auth import PUBLIC

__all__ = ["LOGO_MAX_AGE", "ROUTES", "brand_colour", "brand_logo"]

LOGO_MAX_AGE = 365 * 24 * 3600  # seconds: the URL changes with the logo


# PUBLIC: the logo is shown in emails to anyone they reach; the slug and the digest only
# find a logo the tenant published, never anything else of the tenant.
@get("/brand/{slug:str}/logo/{digest:str}", opt={PUBLIC: True}, sync_to_thread=True)
def brand_logo(slug: FromPath[str], digest: FromPath[str]) -> Response[bytes]:
    try:
        with tenant_tx(slug) as tx:
            logo = read_logo(tx, digest)
    except (LookupError, ValueError):
        logo = None
    if logo is None:
        raise NotFound("no such logo")
    headers = {"Cache-Control": f"public, max-age={LOGO_MAX_AGE}, immutable",
               "X-Content-Type-Options": "nosniff",
               "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; sandbox"}
    return Response(logo.data, media_type=logo.content_type, headers=headers)


# PUBLIC: the sign-in page may one day wear it too, and it says nothing about any tenant (the
# colour is the path). The portal's header links it for a tenant whose brand has a colour of
# its own; the content policy allows no inline style, so the colour comes as a stylesheet.
@get("/brand/colour/{hex_colour:str}", opt={PUBLIC: True})
async def brand_colour(hex_colour: FromPath[str]) -> Response[str]:
    name, dot, extension = hex_colour.partition(".")
    try:
        if (dot, extension) != (".", "css") or len(name) != 6:
            raise ValueError(hex_colour)
        stylesheet = portal_theme(f"#{name.lower()}")
    except (ValueError, InvalidInput):
        raise NotFound("no such colour") from None
    return Response(stylesheet, media_type="text/css",
                    headers={"Cache-Control": f"public, max-age={LOGO_MAX_AGE}, immutable",
                             "X-Content-Type-Options": "nosniff"})


ROUTES = [brand_logo, brand_colour]
