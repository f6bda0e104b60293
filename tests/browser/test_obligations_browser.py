"""Obligations in a real browser: an administrator makes an API key on the API keys page
(shown once), a host product sends a calibration certificate through the events API with
that key, the certificate appears on the obligations page with its next reminder, and after
the clock's scan (the scan actor, run by a real worker) its notice is in the technician's
inbox and in the subject's ledger. Screenshots land in test-artifacts/."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, expect

from actors.scan import scan_tenant
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from portal.templating import short_date
from tests.browser.test_portal_browser import DESKTOP, PASSWORD, open_page, sign_in
from tests.integration.conftest import RunningWorker
from tocsin.shell.client import TocsinClient
from tocsin.shell.demo_metrology import certificate_event, demo_certificates, set_up_metrology

pytestmark = pytest.mark.browser

ADMIN_EMAIL = "admin@tenant.example"
TECH = "tech.london@demo.example"
ZONE = "Europe/London"


def test_a_subject_sent_through_the_events_api_appears_on_the_obligations_page_and_its_notice_in_the_inbox(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path
) -> None:
    set_up_metrology(tenant.slug, PASSWORD)
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, ADMIN_EMAIL, Role.ADMIN, PASSWORD, display_name="Sam Admin")
    page, errors = open_page(browser, DESKTOP)
    sign_in(page, portal_url, tenant, ADMIN_EMAIL)

    # The key, made on the API keys page and shown once.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="API keys").click()
    page.get_by_label("Label").fill("Metrology host (production)")
    page.get_by_role("button", name="Create key").click()
    shown = page.locator("#new-key-value")
    expect(shown).to_be_visible()
    key = shown.input_value()
    assert key.startswith("tsk_")
    page.get_by_role("button", name="Copy").click()
    page.screenshot(path=artifacts / "api-keys.png", full_page=True)
    page.reload()
    expect(page.get_by_role("row", name="Metrology host (production)")).to_contain_text("Active")
    expect(page.locator("#new-key-value")).to_have_count(0)  # never shown again

    # A host product sends a certificate due in three days at the London site.
    due = datetime.now(UTC).astimezone(ZoneInfo(ZONE)).date() + timedelta(days=3)
    with TocsinClient(portal_url, key) as client:
        client.send_event(certificate_event("CAL-B-1", "Weighbridge WB-9", "london", "London weighbridge",
                                            ZONE, due, TECH), idempotency_key="cal-b-1-created")
        client.send_batch(demo_certificates(datetime.now(UTC)), idempotency_key="demo-certificates")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Obligations").click()
    row = page.get_by_role("row").filter(has_text="CAL-B-1")
    expect(row).to_contain_text(short_date(due))
    expect(row).to_contain_text("7 days before")
    expect(row).to_contain_text("Due now: the next scan sends it")
    expect(row).to_contain_text("None yet")

    # The clock's scan, as the product runs it: the scan actor, then preparation and delivery.
    worker = RunningWorker()
    try:
        scan_tenant.send(tenant.slug, datetime.now(UTC).isoformat())
        worker.drain()
    finally:
        worker.stop()

    page.reload()
    expect(row).to_contain_text("1 claimed")
    expect(row).to_contain_text("1 day before")
    expect(row).to_contain_text(f"Goes out on {short_date(due - timedelta(days=1))}")
    page.screenshot(path=artifacts / "obligations.png", full_page=True)
    # Filtering swaps the list in place (htmx) and the export follows the filters.
    page.get_by_label("Overdue").check()
    expect(page.get_by_role("row").filter(has_text="CAL-K-203")).to_contain_text("2 days overdue")
    expect(row).to_have_count(0)
    expect(page.locator("#export-csv")).to_have_attribute("href", "/obligations.csv?overdue=1")
    assert "overdue=1" in page.url  # the filtered list has an address of its own
    page.get_by_role("link", name="Clear").click()
    expect(row).to_have_count(1)
    row.get_by_role("link", name="CAL-B-1").click()
    expect(page.get_by_role("heading", name="CAL-B-1 · Weighbridge WB-9")).to_be_visible()
    expect(page.locator("#notices-title ~ .ledger")).to_contain_text("7 days before")
    expect(page.locator(".milestones")).to_contain_text("Notice claimed")
    page.screenshot(path=artifacts / "obligation-subject.png", full_page=True)
    assert errors == []

    # The technician reads the reminder in the inbox.
    tech_page, tech_errors = open_page(browser, DESKTOP)
    sign_in(tech_page, portal_url, tenant, TECH)
    notice = tech_page.locator(".item").filter(has_text="Calibration of Weighbridge WB-9 due")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("London weighbridge")
    tech_page.screenshot(path=artifacts / "obligation-inbox.png", full_page=True)
    assert tech_errors == []
