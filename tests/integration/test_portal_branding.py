"""The Branding page over HTTP: an administrator saves the brand and uploads a logo, a colour
below AA contrast and a logo that lies about its type or carries a script are refused with a
message that says why, and nobody else sees the page."""

from __future__ import annotations

import html
import re

from tests.integration.builders import scalar
from tests.integration.portal_support import People, PortalClient, csrf_token, sign_in

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
SCRIPTED = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'


def test_an_admin_brands_the_emails_and_bad_colours_and_logos_are_refused(
    people: People, portal: PortalClient
) -> None:
    assert sign_in(portal, people.tenant.slug, people.admin.email).status_code == 303
    page = portal.get("/settings/brand")
    assert page.status_code == 200 and 'class="brand-preview-frame"' in page.text
    token = csrf_token(page.text)
    form = {"display_name": "Acme Compliance", "footer": "Acme GmbH, 1 Road, Berlin", "sender_name": "Acme",
            "reply_to": "help@acme.example", "default_locale": "de", "_csrf_token": token}

    refused = portal.post("/settings/brand", data={**form, "colour": "#ffd700"})
    assert refused.status_code == 422 and "contrast of 1.4:1 on white" in refused.text
    assert scalar(people.tenant, "SELECT count(*) FROM tenant_brand") == 0

    preview = portal.post("/settings/brand/preview", data={**form, "colour": "#0f5132"},
                          headers={"HX-Request": "true"})
    assert preview.status_code == 200
    frame = re.search(r'src="([^"]+)"', preview.text)
    assert frame
    document = portal.get(html.unescape(frame.group(1)))
    assert document.status_code == 200 and "Portalzugang" in document.text  # German, as chosen
    assert "#0f5132" in document.text and "Acme GmbH, 1 Road, Berlin" in document.text
    assert "style-src 'unsafe-inline'" in document.headers["content-security-policy"]
    saved = portal.post("/settings/brand", data={**form, "colour": "#0F5132"}, follow_redirects=False)
    assert saved.status_code == 303
    assert scalar(people.tenant, "SELECT colour || ' ' || default_locale FROM tenant_brand") == "#0f5132 de"

    lying = portal.post("/settings/brand/logo", data={"_csrf_token": token},
                        files={"logo": ("logo.png", SCRIPTED.replace(b"<script>alert(1)</script>", b""),
                                        "image/png")})
    assert lying.status_code == 422 and "says it is image/png, but its content is image/svg+xml" in lying.text
    scripted = portal.post("/settings/brand/logo", data={"_csrf_token": token},
                           files={"logo": ("logo.svg", SCRIPTED, "image/svg+xml")})
    assert scripted.status_code == 422 and "logos may not run code" in scripted.text
    uploaded = portal.post("/settings/brand/logo", data={"_csrf_token": token},
                           files={"logo": ("logo.png", PNG, "image/png")}, follow_redirects=False)
    assert uploaded.status_code == 303
    assert scalar(people.tenant, "SELECT logo_type FROM tenant_brand") == "image/png"
    logo_url = f"/brand/{people.tenant.slug}/logo/"
    assert logo_url in portal.get("/settings/brand").text


def test_only_administrators_see_the_branding_page(people: People, portal: PortalClient) -> None:
    assert sign_in(portal, people.tenant.slug, people.client_user.email).status_code == 303
    assert portal.get("/settings/brand").status_code == 404
