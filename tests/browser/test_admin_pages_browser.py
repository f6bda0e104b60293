"""The administrators' new pages in a real browser, on a desktop and on a phone: adding a
client and managing it (details, licence date with a reason, its users), the audit log that
records each of those changes, and the CSV imports of clients and of subjects (an import
interrupted by the death of its process among them). Screenshots land in test-artifacts/
(admin-*.png)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, ViewportSize, expect

from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from tests.browser.pages import open_page, sign_in
from tests.browser.test_portal_browser import DESKTOP, PASSWORD, PHONE

pytestmark = pytest.mark.browser

ADMIN = "sam.admin@tenant.example"


@pytest.mark.parametrize(("name", "viewport"), [("desktop", DESKTOP), ("phone", PHONE)])
def test_an_administrator_adds_and_manages_a_client_and_reads_it_in_the_audit_log(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path, name: str,
    viewport: ViewportSize,
) -> None:
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, ADMIN, Role.ADMIN, PASSWORD, display_name="Sam Admin")
    page, errors = open_page(browser, viewport)
    sign_in(page, portal_url, tenant, ADMIN, PASSWORD)
    expect(page.get_by_role("heading", name="Inbox")).to_be_visible()

    page.goto(f"{portal_url}/clients")
    page.get_by_role("link", name="New client").click()
    expires = datetime.now(UTC).astimezone(ZoneInfo(tenant.time_zone)).date() + timedelta(days=200)
    page.get_by_label("Name", exact=True).fill("Acme Assurance")
    page.get_by_label("Plan").select_option("enterprise")
    page.get_by_label("Contact person").fill("Inès Martin")
    page.get_by_label("Contact email").fill("ines@acme.example")
    page.get_by_label("Contact phone").fill("+33 1 23 45 67 89")
    page.get_by_label("Licence expires on").fill(expires.isoformat())
    page.screenshot(path=artifacts / f"admin-client-new-{name}.png", full_page=True)
    page.get_by_role("button", name="Add client").click()
    expect(page.get_by_text("Client added.")).to_be_visible()

    page.get_by_label("New expiry date").fill((expires + timedelta(days=365)).isoformat())
    page.get_by_label("Reason").fill("Signed a two-year contract")
    page.get_by_role("button", name="Change expiry date").click()
    expect(page.get_by_text("Expiry date changed.")).to_be_visible()
    page.get_by_label("Email", exact=True).fill("finance@acme.example")
    page.get_by_role("button", name="Invite user").click()
    expect(page.get_by_text("Invitation sent.")).to_be_visible()
    expect(page.get_by_role("row", name="finance@acme.example")).to_contain_text("Invited")
    page.screenshot(path=artifacts / f"admin-client-manage-{name}.png", full_page=True)

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit").click()
    expect(page.get_by_role("heading", name="Audit log")).to_be_visible()
    expect(page.get_by_text("licence.corrected")).to_be_visible()
    expect(page.get_by_text("Signed a two-year contract")).to_be_visible()
    page.screenshot(path=artifacts / f"admin-audit-{name}.png", full_page=True)
    page.get_by_label("What").select_option("client")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_text("client.create")).to_be_visible()
    expect(page.get_by_text("licence.corrected")).to_have_count(0)
    assert errors == []


@pytest.mark.parametrize(("name", "viewport"), [("desktop", DESKTOP), ("phone", PHONE)])
def test_an_administrator_writes_a_subject_without_a_host_product(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path, name: str,
    viewport: ViewportSize,
) -> None:
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, ADMIN, Role.ADMIN, PASSWORD, display_name="Sam Admin")
    page, errors = open_page(browser, viewport)
    sign_in(page, portal_url, tenant, ADMIN, PASSWORD)
    expect(page.get_by_role("heading", name="Inbox")).to_be_visible()
    page.goto(f"{portal_url}/obligations")
    page.get_by_role("link", name="Manual subjects").click()
    page.get_by_role("link", name="New subject", exact=True).click()
    page.get_by_label("Kind").fill("permit")
    page.get_by_label("Reference").fill("P-2041")
    page.get_by_label("Title").fill("Boiler operating permit")
    page.get_by_label("Due on").fill("2031-05-31")
    page.get_by_label("Assignees").fill(ADMIN)
    page.get_by_label("Other fields").fill("site = Harbour works")
    page.get_by_role("button", name="Create subject").click()
    expect(page.get_by_text("Subject created.")).to_be_visible()
    expect(page.get_by_role("row", name="Boiler operating permit")).to_contain_text("2031-05-31")
    page.screenshot(path=artifacts / f"admin-subjects-{name}.png", full_page=True)
    page.get_by_role("link", name="Edit P-2041").click()
    page.get_by_label("Title").fill("")
    page.get_by_label("Assignees").fill("nobody@nowhere.example")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Nothing was saved.")).to_be_visible()
    page.screenshot(path=artifacts / f"admin-subject-refused-{name}.png", full_page=True)
    assert errors == [] or all("400" in e for e in errors)


@pytest.mark.parametrize(("name", "viewport"), [("desktop", DESKTOP), ("phone", PHONE)])
def test_an_administrator_imports_clients_from_a_csv_file_with_a_report_per_row(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path, name: str,
    viewport: ViewportSize,
) -> None:
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, ADMIN, Role.ADMIN, PASSWORD, display_name="Sam Admin")
    csv_file = artifacts / f"clients-{name}.csv"
    lines = ["external_id,name,expires_on,plan,contact_email"]
    lines += [f"C-{n:03d},Client {n},2031-0{1 + n % 9}-15,standard," for n in range(1, 41)]
    lines += ["C-041,Client 41,15/01/2031,standard,", "C-042,Client 42,2031-01-15,platinum,",
              "C-043,,2031-01-15,standard,not-an-email"]
    csv_file.write_text("\r\n".join(lines) + "\r\n")
    page, errors = open_page(browser, viewport)
    sign_in(page, portal_url, tenant, ADMIN, PASSWORD)
    expect(page.get_by_role("heading", name="Inbox")).to_be_visible()
    page.goto(f"{portal_url}/clients")
    page.get_by_role("link", name="Import CSV").click()
    page.screenshot(path=artifacts / f"admin-import-{name}.png", full_page=True)
    page.get_by_label("CSV file").set_input_files(str(csv_file))
    page.get_by_role("button", name="Check the file").click()
    expect(page.get_by_text("43 row(s): 40 valid, 4 problem(s)")).to_be_visible()
    expect(page.get_by_role("row").filter(has_text="Line 44").filter(has_text="client name")).to_have_count(1)
    page.screenshot(path=artifacts / f"admin-import-report-{name}.png", full_page=True)
    page.get_by_role("button", name="Import the valid rows only").click()
    expect(page.get_by_text("40 created, 0 updated, 0 unchanged")).to_be_visible()
    page.screenshot(path=artifacts / f"admin-import-done-{name}.png", full_page=True)
    assert errors == []


@pytest.mark.parametrize(("name", "viewport"), [("desktop", DESKTOP), ("phone", PHONE)])
def test_an_administrator_imports_subjects_and_resumes_an_interrupted_import(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path, name: str,
    viewport: ViewportSize,
) -> None:
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, ADMIN, Role.ADMIN, PASSWORD, display_name="Sam Admin")
    csv_file = artifacts / f"subjects-{name}.csv"
    lines = ["kind,external_id,title,due_on,assignees,fields"]
    lines += [f"permit,P-{n:03d},Permit {n},2031-0{1 + n % 9}-15,{ADMIN},site = Site {n}"
              for n in range(1, 31)]
    lines += ["permit,P-031,Permit 31,15/01/2031,,", "Permit!,P-032,Permit 32,2031-01-15,,",
              "permit,P-033,Permit 33,2031-01-15,nobody@nowhere.example,"]
    csv_file.write_text("\r\n".join(lines) + "\r\n")
    page, errors = open_page(browser, viewport)
    sign_in(page, portal_url, tenant, ADMIN, PASSWORD)
    expect(page.get_by_role("heading", name="Inbox")).to_be_visible()
    page.goto(f"{portal_url}/subjects")
    page.get_by_role("link", name="Import CSV").click()
    expect(page.get_by_role("heading", name="Import subjects")).to_be_visible()
    page.screenshot(path=artifacts / f"admin-subject-import-{name}.png", full_page=True)
    page.get_by_label("CSV file").set_input_files(str(csv_file))
    page.get_by_role("button", name="Check the file").click()
    expect(page.get_by_text("33 row(s): 30 valid, 3 problem(s)")).to_be_visible()
    problem = page.get_by_role("row").filter(has_text="Line 34").filter(has_text="no active user")
    expect(problem).to_have_count(1)
    page.screenshot(path=artifacts / f"admin-subject-import-report-{name}.png", full_page=True)

    # The web process running it dies: claimed, never run, its lease lapsed.
    import_id = int(page.url.rsplit("/", 1)[1])
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE imports SET stage = 'running', mode = 'valid_only', attempt = 1, "
                        "lease_until = now() - interval '1 minute' WHERE id = %s", [import_id])
    page.reload()
    expect(page.get_by_role("heading", name="Interrupted")).to_be_visible()
    page.screenshot(path=artifacts / f"admin-subject-import-interrupted-{name}.png", full_page=True)
    page.get_by_role("button", name="Resume the import").click()
    expect(page.get_by_text("30 created, 0 updated, 0 unchanged")).to_be_visible()
    page.screenshot(path=artifacts / f"admin-subject-import-done-{name}.png", full_page=True)
    assert errors == []
