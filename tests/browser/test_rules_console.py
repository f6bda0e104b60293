"""The rules console in headless Chromium: an admin builds a time rule with two conditions
through the htmx builder, previews its template, saves it, dry-runs it against a subject
that does not match and reads why, then enables it. Screenshots of the list, the builder
and the dry run go to test-artifacts/."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import create_rule, get_rule, list_rules
from domain.people.identity import Role
from tests.browser.pages import open_page, sign_in
from tests.integration.portal_support import local_today
from tests.integration.rule_builders import add_product, add_subject

pytestmark = pytest.mark.browser

PASSWORD = "correct horse battery"
ADMIN = "admin@metrology.example"


def choose(page: Page, row: Locator, name: str, value: str) -> None:
    """Pick an option of a condition row's select and wait for htmx to redraw the row (each
    drawing has an id of its own): the next choice is made in the new row.

    htmx binds a freshly swapped-in row when it settles, a moment after the row appears; a
    change made in between is not seen. So the change is sent again until the redraw comes
    (sending it twice redraws the same row twice, which is harmless)."""
    before = row.get_attribute("id")
    select = row.locator(f"select[name={name}]")
    select.select_option(value)
    for _ in range(10):
        try:
            expect(page.locator(f"#{before}")).to_have_count(0, timeout=2_000)
            return
        except AssertionError:
            select.dispatch_event("change")
    expect(page.locator(f"#{before}")).to_have_count(0)


def test_an_admin_builds_previews_dry_runs_and_enables_a_time_rule(
        browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path) -> None:
    add_product(tenant, "metrology", subject_kinds=("certificate", "instrument"))
    due = local_today(tenant) + timedelta(days=5)
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, ADMIN, Role.ADMIN, PASSWORD)
        create_rule(tx, {  # a rule already there, so the list is not empty
            "name": "Instrument registered", "product": "metrology", "kind": "created",
            "trigger": {"subject_kind": "instrument"},
            "actions": {"channels": ["in_app"], "category": "case_update",
                        "recipients": [{"type": "assignees"}],
                        "template": {"title": "New instrument {{ subject.title }}", "body": "Registered"}}},
            ADMIN)
    add_subject(tenant, product="metrology", kind="certificate", external_id="CAL-2207",
                fields={"calibration_due": due.isoformat(), "lab": "North lab"})
    closed = add_subject(tenant, product="metrology", kind="certificate", external_id="CAL-1934",
                         fields={"calibration_due": due.isoformat(), "lab": "North lab"})
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE subjects SET status = 'closed', title = 'Balance B-12', "
                        "updated_at = now() + interval '1 minute' WHERE id = %s", [closed])

    page, errors = open_page(browser, {"width": 1280, "height": 900})
    sign_in(page, portal_url, tenant, ADMIN, PASSWORD, path="/login?next=/rules")
    expect(page.get_by_role("heading", name="Rules", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="Instrument registered", exact=True)).to_be_visible()

    page.get_by_role("link", name="New rule").click()
    expect(page.get_by_role("heading", name="New rule for Metrology")).to_be_visible()
    page.get_by_label("Name", exact=True).fill("Calibration certificate due")
    page.get_by_label("A date comes near or passes").check()  # htmx redraws the form
    expect(page.get_by_label("Due date", exact=True)).to_be_visible()
    page.get_by_label("Subject kind", exact=True).select_option("certificate")
    page.get_by_label("Due date", exact=True).select_option("field.calibration_due")
    page.get_by_label("Offsets in days").fill("-30, -7, -1, 0")

    rows = page.locator("#conditions-rows .cond-row")
    first = rows.nth(0)
    choose(page, first, "conditions_fact", "subject.status")
    choose(page, first, "conditions_op", "not_equals")
    first.locator("input[name=conditions_value]").fill("closed")
    with page.expect_response(lambda r: "/rules/builder/row" in r.url):
        page.get_by_role("button", name="Add a condition").click()
    expect(rows).to_have_count(2)
    second = rows.nth(1)
    choose(page, second, "conditions_fact", "field.lab")
    expect(second.locator("select[name=conditions_op] option[value=changed]")).to_have_count(0)
    choose(page, second, "conditions_op", "equals")
    second.locator("input[name=conditions_value]").fill("North lab")

    page.get_by_label("Title", exact=True).fill("{{ subject.external_id }} calibration due {{ due.date }}")
    page.get_by_label("Body", exact=True).fill("{{ subject.title }} at {{ field.lab }}: due {{ due.date }} "
                                   "(window from {{ due.milestone_date }}).")
    page.get_by_label("Preview against").select_option(label="certificate CAL-1934 · Balance B-12 (closed)")
    preview = page.locator("#preview")
    expect(preview.locator(".preview-title")).to_have_text(f"CAL-1934 calibration due {due.isoformat()}")
    expect(preview.locator(".preview-body")).to_contain_text("Balance B-12 at North lab")
    # A template the sandbox refuses says why, live, before anything is saved.
    page.get_by_label("Title", exact=True).fill("{{ subject.external_id ")
    expect(preview.locator(".preview-refused")).to_contain_text("The title template is refused")
    page.get_by_label("Title", exact=True).fill("{{ subject.external_id }} calibration due {{ due.date }}")
    expect(preview.locator(".preview-title")).to_have_text(f"CAL-1934 calibration due {due.isoformat()}")
    page.screenshot(path=artifacts / "rules-builder.png", full_page=True)

    page.get_by_role("button", name="Save rule").click()
    expect(page.get_by_text("Rule created.")).to_be_visible()
    expect(page.get_by_role("heading", name="Calibration certificate due")).to_be_visible()
    with tenant_tx(tenant.slug) as tx:
        rule = next(r for r in list_rules(tx) if r.name == "Calibration certificate due")
    assert rule.enabled is False and rule.kind == "time"
    assert rule.definition.conditions == {"all": [
        {"fact": "subject.status", "op": "not_equals", "value": "closed"},
        {"fact": "field.lab", "op": "equals", "value": "North lab"}]}
    assert rule.definition.to_json()["trigger"] == {
        "subject_kind": "certificate",
        "due": {"fact": "field.calibration_due", "offsets": [-30, -7, -1, 0], "business_days": False}}

    page.get_by_role("link", name="Dry run", exact=True).click()
    page.get_by_label("Subject", exact=True).select_option(str(closed))
    page.get_by_role("button", name="Dry-run against this subject").click()
    result = page.locator("#dry-run-result")
    expect(result.get_by_role("heading", name="It would not fire")).to_be_visible()
    expect(result.locator(".why-not")).to_contain_text("Conditions: do not hold (1 of 2 false")
    expect(result.locator(".trace-false")).to_contain_text("subject.status is not “closed”")
    expect(result.locator(".trace-false")).to_contain_text('"closed"')
    expect(result.locator(".milestone-current")).to_contain_text("offset:-7")
    page.screenshot(path=artifacts / "rules-dry-run.png", full_page=True)

    page.locator(".crumbs a").click()
    page.get_by_role("button", name="Enable", exact=True).click()
    expect(page.get_by_text("Rule enabled")).to_be_visible()
    with tenant_tx(tenant.slug) as tx:
        assert get_rule(tx, rule.id).enabled is True

    page.locator(".crumbs a").click()
    row = page.locator(f"#rule-{rule.id}")
    expect(row).to_contain_text("Enabled")
    expect(row).to_contain_text("-30, -7, -1, 0 calendar days from field.calibration_due")
    page.screenshot(path=artifacts / "rules-list.png", full_page=True)
    assert errors == []

    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{portal_url}/rules/{rule.id}")
    wide = page.evaluate(
        "[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right"
        " > window.innerWidth + 1).map(e => e.tagName + '.' + e.className + '#' + e.id)")
    assert wide == [], f"the builder scrolls sideways on a phone: {wide}"
    page.screenshot(path=artifacts / "rules-builder-phone.png", full_page=True)
    page.context.close()
