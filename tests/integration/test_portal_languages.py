"""The portal in the reader's language and the tenant's brand: a French administrator's pages
are French, a German client's user meets the Annual License Expired wall in German with a
German date, the sign-in page follows the browser's language, and every page's header wears
the tenant's name, logo and colour."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from babel.dates import format_date

from db.notices.licence_scan import claim_due_milestones
from db.people.brand import save_brand, save_logo
from db.people.clients import get_client
from db.platform.tenancy import tenant_tx
from tests.integration.builders import scalar
from tests.integration.portal_support import (
    HTMX,
    People,
    PortalClient,
    csrf_token,
    local_today,
    sign_in,
    signed_in,
)

SVG = b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"><rect width="10" height="10"/></svg>'
# Words of the navigation and of each page, in French; none of the English ones may be left.
FRENCH_PAGES = {
    "/": ["Boîte de réception", "Avis pour"],
    "/clients": ["Licences des clients", "Nouveau client", "Importer un CSV"],
    "/members": ["Inviter quelqu\u2019un", "Envoyer l\u2019invitation"],
    "/preferences": ["Préférences de notification", "Heures calmes"],
    "/settings": ["Paramètres"],
    "/ledger": ["Registre des notifications"],
    "/rules": ["Règles"],
    "/audit": ["Journal d\u2019audit"],
}
ENGLISH_NAV = [">Inbox", ">Members<", ">Settings<", ">Preferences<", ">Sign out<", "Skip to main content"]


def _choose_language(portal: PortalClient, locale: str) -> None:
    page = portal.get("/preferences")
    saved = portal.post("/preferences/language", headers=HTMX,
                        data={"locale": locale, "_csrf_token": csrf_token(page.text)})
    assert saved.status_code == 200
    assert saved.headers["HX-Refresh"] == "true"  # the page itself changes language


def test_a_french_administrators_portal_pages_are_french(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.admin)
    _choose_language(portal, "fr")
    for path, words in FRENCH_PAGES.items():
        page = portal.get(path)
        assert page.status_code == 200, path
        text = page.text
        assert '<html lang="fr" dir="ltr">' in text, path
        for word in words:
            assert word in text, (path, word)
        for english in ENGLISH_NAV:
            assert english not in text, (path, english)
    # Dates are French, in the viewer's zone: the client's licence page spells the month.
    licence = portal.get(f"/clients/{people.client.id}").text
    assert format_date(people.client.access_expires_on, "long", locale="fr") in licence
    # An error page is French too.
    missing = portal.get("/clients/999999")
    assert missing.status_code == 404 and "Page introuvable" in missing.text


def test_a_german_clients_user_meets_the_wall_in_german(portal: PortalClient, people: People) -> None:
    # The administrator gives the client its language on the client's page.
    signed_in(portal, people, people.admin)
    page = portal.get(f"/clients/{people.client.id}/manage").text
    assert 'name="locale"' in page
    version = str(scalar(people.tenant, "SELECT version FROM clients WHERE id = %s", people.client.id))
    saved = portal.post(f"/clients/{people.client.id}/details", follow_redirects=False, data={
        "_csrf_token": csrf_token(page), "name": people.client.name, "plan": people.client.plan,
        "locale": "de", "version": version})
    assert saved.status_code == 303
    with tenant_tx(people.tenant.slug) as tx:
        assert get_client(tx, people.client.id).locale == "de"
        assert tx.conn.execute("SELECT count(*) FROM audit_log WHERE action = 'client.edit' "
                               "AND after::text LIKE '%%\"locale\": \"de\"%%'").fetchone() == (1,)
        lapsed = local_today(people.tenant) - timedelta(days=3)
        tx.conn.execute("UPDATE clients SET access_expires_on = %s WHERE id = %s", [lapsed, people.client.id])
        claim_due_milestones(tx, datetime.now(UTC))
    portal.cookies.clear()

    assert sign_in(portal, people.tenant.slug, people.client_user.email).status_code == 303
    wall = portal.get("/")
    assert wall.status_code == 402
    assert '<html lang="de" dir="ltr">' in wall.text
    assert "Ihre Jahreslizenz ist abgelaufen" in wall.text
    assert format_date(lapsed, "long", locale="de") in wall.text  # "1. Dezember 2026"
    assert "Für ein Jahr verlängern" in wall.text
    assert "Your annual licence has expired" not in wall.text


def test_the_sign_in_page_follows_the_browsers_language(portal: PortalClient) -> None:
    german = portal.get("/login", headers={"Accept-Language": "de-CH, de;q=0.9, en;q=0.5"})
    assert '<html lang="de"' in german.text and "Anmelden" in german.text
    french = portal.get("/login", headers={"Accept-Language": "fr-FR"})
    assert '<html lang="fr"' in french.text and "Se connecter" in french.text
    other = portal.get("/login", headers={"Accept-Language": "ja, xx;q=0.8"})
    assert '<html lang="en"' in other.text and "Sign in" in other.text


def test_every_pages_header_wears_the_tenants_brand(portal: PortalClient, people: People) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        save_brand(tx, people.admin.id, display_name="Northwind Compliance", colour="#8B1E3F", footer="")
        digest = save_logo(tx, people.admin.id, SVG, "image/svg+xml")
    signed_in(portal, people, people.admin)
    for path in ("/", "/preferences", "/clients"):
        page = portal.get(path).text
        header = page[page.index('<header class="topbar">'):page.index("</header>")]
        assert "Northwind Compliance" in header, path
        assert f'src="/brand/{people.tenant.slug}/logo/{digest[:16]}"' in header, path
        assert '<link rel="stylesheet" href="/brand/colour/8b1e3f.css">' in page, path
    stylesheet = portal.get("/brand/colour/8b1e3f.css")
    assert stylesheet.status_code == 200 and stylesheet.headers["content-type"].startswith("text/css")
    assert "--accent: #8b1e3f;" in stylesheet.text and "immutable" in stylesheet.headers["cache-control"]
    logo = portal.get(f"/brand/{people.tenant.slug}/logo/{digest[:16]}")
    assert logo.status_code == 200
    # A colour that fails AA on white, or anything that is not one, is no stylesheet.
    for refused in ("ffff00.css", "8b1e3f.js", "8b1e3f", "zzzzzz.css"):
        assert portal.get(f"/brand/colour/{refused}").status_code == 404, refused


def test_without_a_brand_the_header_shows_the_tenants_name_and_tocsins_colour(
    portal: PortalClient, people: People
) -> None:
    page = signed_in(portal, people, people.client_user)
    header = page[page.index('<header class="topbar">'):page.index("</header>")]
    assert people.tenant.name in header
    assert "/brand/colour/" not in page
    assert re.search(r'<html lang="en" dir="ltr">', page)


def test_a_refused_form_field_is_explained_in_the_readers_language(
        portal: PortalClient, people: People) -> None:
    # The domain's refusals are catalog messages: the preference centre and the texts page
    # say what to change in German to a German reader, with what they typed in it.
    signed_in(portal, people, people.client_user)
    _choose_language(portal, "de")
    token = csrf_token(portal.get("/preferences").text)
    schedule = portal.post("/preferences/schedule", headers=HTMX, data={
        "_csrf_token": token, "quiet_start": "22:00", "quiet_end": "abends", "digest_time": "08:00",
        "weekly_day": "1", "time_zone": "Mars/Olympus"})
    assert schedule.status_code == 422
    assert "Das Ende muss eine Uhrzeit wie 22:00 sein" in schedule.text
    assert "Unbekannte Zeitzone „Mars/Olympus“" in schedule.text
    assert "must be a time" not in schedule.text and "unknown time zone" not in schedule.text

    phone = portal.post("/preferences/texts/phone", follow_redirects=False, data={
        "_csrf_token": csrf_token(portal.get("/preferences/texts").text), "phone": "07400 123456"})
    assert phone.status_code == 422
    assert "Beginnen Sie die Nummer mit + und der Ländervorwahl" in phone.text
