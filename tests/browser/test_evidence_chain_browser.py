"""The evidence chain page in a real browser, on a desktop and a phone: the charts with the
tables behind them, the last verification, the signing key, the checkpoints and the pack's
export form. Screenshots land in test-artifacts/ (evidence-chain.png, evidence-chain-phone.png,
evidence-pack-form.png, evidence-pack-form-phone.png)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, expect

from db.evidence.checkpoints import sign_checkpoint
from db.evidence.verifications import verify_and_record
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.people.clients import create_client
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from tests.browser.test_portal_browser import DESKTOP, PASSWORD, PHONE, open_page, sign_in
from tocsin.core.evidence_signing import signer_for

pytestmark = pytest.mark.browser

ADMIN = "admin@tenant.example"


def _history(tenant: Tenant) -> None:
    today = datetime.now(UTC).astimezone(ZoneInfo(tenant.time_zone)).date()
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, ADMIN, Role.ADMIN, PASSWORD, display_name="Sam Admin")
        for n, days in enumerate((7, 14, 30, 1, 60)):
            client = create_client(tx, f"Client {n}", today + timedelta(days=days))
            create_user(tx, f"user{n}@client.example", Role.CLIENT_USER, PASSWORD, client_id=client.id)
        claim_due_milestones(tx, datetime.now(UTC))
        prepare_claims(tx)
        # A few days of history, so the daily charts have more than one bar.
        tx.conn.execute("UPDATE notification_ledger SET "
                        "claimed_at = claimed_at - make_interval(days => (id % 5)::int), "
                        "delivered_at = claimed_at - make_interval(days => (id % 5)::int) "
                        "+ make_interval(mins => (id * 7)::int)")
    verify_and_record(tenant.slug)
    sign_checkpoint(tenant.slug, "manual", signer_for("a-browser-test-secret-of-thirty-two-bytes-or-more"))


def test_the_evidence_chain_page_shows_its_charts_and_tables_on_desktop_and_phone(
        browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path) -> None:
    _history(tenant)
    for viewport, name in ((DESKTOP, "evidence-chain.png"), (PHONE, "evidence-chain-phone.png")):
        page, errors = open_page(browser, viewport)
        sign_in(page, portal_url, tenant, ADMIN)
        page.goto(f"{portal_url}/ledger")
        page.get_by_role("link", name="Evidence chain").click()
        expect(page.get_by_role("heading", name="Evidence chain", level=1)).to_be_visible()
        expect(page.locator("#verification-result")).to_contain_text("The chain verifies.")
        expect(page.get_by_role("img", name="Claims per day")).to_be_visible()
        expect(page.get_by_role("img", name="Deliveries by status")).to_be_visible()
        expect(page.get_by_role("table", name="Claims per rule, last 14 days")).to_have_count(1)
        expect(page.get_by_role("row", name="manual")).to_have_count(1)
        form = page.get_by_role("form", name="Export an evidence pack")
        expect(form.get_by_role("button", name="Download the pack")).to_be_visible()
        page.screenshot(path=artifacts / name, full_page=True)
        form.screenshot(path=artifacts / name.replace("chain", "pack-form"))
        assert errors == []
        page.context.close()


def test_the_evidence_settings_are_saved_from_the_settings_page_on_desktop_and_phone(
        browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path) -> None:
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, ADMIN, Role.ADMIN, PASSWORD, display_name="Sam Admin")
    for viewport, name in ((DESKTOP, "evidence-settings.png"), (PHONE, "evidence-settings-phone.png")):
        page, errors = open_page(browser, viewport)
        sign_in(page, portal_url, tenant, ADMIN)
        page.goto(f"{portal_url}/settings")
        page.get_by_label("Compliance address").fill("dpo@tenant.example")
        page.get_by_label("Keep message bodies and addresses for (days)").fill("365")
        page.locator("form[action='/settings/evidence'] button").click()
        expect(page.get_by_role("status")).to_contain_text("Saved.")
        expect(page.get_by_label("Compliance address")).to_have_value("dpo@tenant.example")
        page.locator("section[aria-labelledby='evidence-title']").screenshot(path=artifacts / name)
        assert errors == []
        page.context.close()
