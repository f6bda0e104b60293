"""The Webhooks page in a real browser, on desktop and phone: an administrator adds an
endpoint (a receiver on 127.0.0.1), sends it a test event that a real worker delivers, and
reads the delivery log. Screenshots land in test-artifacts/."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from tests.browser.test_portal_browser import DESKTOP, PASSWORD, PHONE, open_page, sign_in
from tests.integration.conftest import RunningWorker
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.browser

ADMIN_EMAIL = "admin@hooks.example"


def test_an_admin_adds_an_endpoint_sends_a_test_event_and_reads_the_log_on_desktop_and_phone(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path,
) -> None:
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, ADMIN_EMAIL, Role.ADMIN, PASSWORD, display_name="Sam Admin")
    worker = RunningWorker()
    try:
        with WebhookReceiver() as receiver:
            page, errors = open_page(browser, DESKTOP)
            sign_in(page, portal_url, tenant, ADMIN_EMAIL)
            page.get_by_role("navigation", name="Main").get_by_role("link", name="Webhooks").click()
            expect(page.get_by_role("heading", name="No endpoints yet")).to_be_visible()
            page.screenshot(path=artifacts / "webhooks-empty.png", full_page=True)
            page.get_by_label("URL").fill(receiver.url)
            page.get_by_label("Description").fill("Case management system (production)")
            page.get_by_role("button", name="Add endpoint").click()
            expect(page.get_by_role("status")).to_contain_text("Endpoint added")
            page.get_by_role("button", name="Send a test event").click()
            expect(page.get_by_role("status")).to_contain_text("Test event queued")
            for _ in range(60):
                if len(receiver.calls()) == 1:
                    break
                page.wait_for_timeout(250)
            page.reload()
            expect(page.get_by_role("table")).to_contain_text("HTTP 200")
            expect(page.get_by_role("button", name="Redeliver")).to_be_visible()
            page.screenshot(path=artifacts / "webhook-endpoint.png", full_page=True)
            page.get_by_role("link", name="← Webhooks").click()
            expect(page.get_by_role("table")).to_contain_text("Healthy")
            page.screenshot(path=artifacts / "webhooks.png", full_page=True)
            page.get_by_role("link", name="Every channel's health").click()
            expect(page.locator("#channel-webhook")).to_contain_text("1 of 1 endpoint enabled.")
            page.screenshot(path=artifacts / "channels.png", full_page=True)
            assert errors == []

            phone, phone_errors = open_page(browser, PHONE)
            sign_in(phone, portal_url, tenant, ADMIN_EMAIL)
            phone.goto(f"{portal_url}/webhooks")
            expect(phone.get_by_text("Case management system (production)")).to_be_visible()
            phone.screenshot(path=artifacts / "webhooks-phone.png", full_page=True)
            phone.get_by_role("link", name="Delivery log").click()
            expect(phone.get_by_text("HTTP 200")).to_be_visible()
            phone.screenshot(path=artifacts / "webhook-endpoint-phone.png", full_page=True)
            assert phone_errors == []
            assert receiver.calls()[0].webhook_id.startswith(f"tocsin_{tenant.slug}_")
    finally:
        worker.stop()
