"""The tenant's brand in PostgreSQL: a refused colour or logo writes nothing, a stored logo is
named by its digest in the URL every email references, and the email context reads the brand
as it is when the email goes."""

from __future__ import annotations

import hashlib

import pytest

from db.delivery.email_context import read_brand
from db.people.brand import save_brand, save_logo
from db.platform.tenancy import Tenant, tenant_tx
from domain.errors import InvalidInput
from tests.integration.builders import add_admin

SVG = b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>'


def test_a_refused_brand_writes_nothing_and_a_saved_one_is_what_emails_show(tenant: Tenant) -> None:
    admin = add_admin(tenant)
    with tenant_tx(tenant.slug) as tx, pytest.raises(InvalidInput, match="contrast"):
        save_brand(tx, admin.id, display_name="Acme", colour="#ffff00", footer="1 Road")
    with tenant_tx(tenant.slug) as tx, pytest.raises(InvalidInput, match="logos may not run code"):
        save_logo(tx, admin.id, b'<svg xmlns="http://www.w3.org/2000/svg" onload="x()"/>', "image/svg+xml")
    with tenant_tx(tenant.slug) as tx:
        assert tx.conn.execute("SELECT count(*) FROM tenant_brand").fetchone() == (0,)
        assert read_brand(tx).display_name == tenant.name  # no brand yet: the tenant's name

    with tenant_tx(tenant.slug) as tx:
        save_brand(tx, admin.id, display_name="Acme Compliance", colour="#0F5132",
                   footer="Acme GmbH, 1 Road, Berlin", default_locale="de")
        digest = save_logo(tx, admin.id, SVG, "image/svg+xml")
    assert digest == hashlib.sha256(SVG).hexdigest()
    with tenant_tx(tenant.slug) as tx:
        brand = read_brand(tx)
    assert (brand.display_name, brand.colour, brand.default_locale) == ("Acme Compliance", "#0f5132", "de")
    shown = brand.brand("https://portal.example")
    assert shown.logo_url == f"https://portal.example/brand/{tenant.slug}/logo/{digest[:16]}"
    assert shown.footer == "Acme GmbH, 1 Road, Berlin"


def test_the_logo_is_served_publicly_by_its_digest_with_cache_headers(tenant: Tenant) -> None:
    from litestar.testing import TestClient

    from tocsin.boot.web import build_app

    admin = add_admin(tenant)
    with tenant_tx(tenant.slug) as tx:
        digest = save_logo(tx, admin.id, SVG, "image/svg+xml")
        url = read_brand(tx).brand("").logo_url
    assert url == f"/brand/{tenant.slug}/logo/{digest[:16]}"
    with TestClient(app=build_app()) as client:  # no session: as a mail client fetches it
        response = client.get(url)
        assert response.status_code == 200 and response.content == SVG
        assert response.headers["content-type"].startswith("image/svg+xml")
        assert "immutable" in response.headers["cache-control"]
        assert "default-src 'none'" in response.headers["content-security-policy"]
        assert client.get(f"/brand/{tenant.slug}/logo/{'0' * 16}").status_code == 404
        assert client.get(f"/brand/nosuchtenant/logo/{digest[:16]}").status_code == 404
