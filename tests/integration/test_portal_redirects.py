"""Open redirects through the real portal: a crafted next= on the sign-in form, or a
notification deep link, never sends a browser to another origin (`/\\evil.example` is
`//evil.example` to a browser)."""

from __future__ import annotations

import pytest

from db.delivery.inbox import add_to_inbox
from db.platform.tenancy import tenant_tx
from tests.integration.portal_support import People, PortalClient, sign_in

CRAFTED = ["/\\evil.example", "/\\/evil.example", "/\t/evil.example", "/%2F/evil.example",
           "/%5Cevil.example", "//evil.example", "/%252F%252Fevil.example"]


@pytest.mark.parametrize("crafted", CRAFTED)
def test_signing_in_with_a_crafted_next_lands_on_the_inbox_not_another_site(
    portal: PortalClient, people: People, crafted: str
) -> None:
    page = portal.get("/login", params={"next": crafted})
    assert page.status_code == 200
    assert "evil.example" not in page.text
    response = sign_in(portal, people.tenant.slug, people.admin.email, next_path=crafted)
    assert response.status_code == 303
    assert response.headers["location"] == "/"


def test_signing_in_with_a_path_on_this_site_returns_there(portal: PortalClient, people: People) -> None:
    response = sign_in(portal, people.tenant.slug, people.admin.email, next_path="/clients")
    assert (response.status_code, response.headers["location"]) == (303, "/clients")


def test_a_notification_whose_link_leads_off_site_is_shown_without_the_link(
    portal: PortalClient, people: People
) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        for n, href in enumerate([*CRAFTED, "/licence"]):
            add_to_inbox(tx, people.admin.id, "report_ready", f"Report {n}", "Ready.", {"href": href},
                         idempotency_key=f"redirect-test-{n}")
    assert sign_in(portal, people.tenant.slug, people.admin.email).status_code == 303
    inbox = portal.get("/")
    assert inbox.status_code == 200
    assert "Report 0" in inbox.text and "Report 7" in inbox.text  # every notice is listed
    assert "evil.example" not in inbox.text
    assert 'href="/licence"' in inbox.text  # the genuine deep link stays
