"""The obligations page over the real app and PostgreSQL: certificates sent through the
events API, watched by the metrology demo's time rule; each listed with its due date, its
next reminder and the local date it goes out (the site's calendar, business days counted
against the tenant's working calendar), overdue ones marked; filters, the CSV export, the
per-subject page with every notice the real scan claimed; team only."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from db.delivery.inbox import acknowledge, inbox_page
from db.events.api_keys import create_api_key
from db.notices.scan import run_scan
from db.people.users import create_user
from db.platform.tenancy import tenant_tx
from db.rules.calendar import save_calendar
from db.rules.definitions import create_rule
from domain.people.identity import Role
from domain.rules.obligation_dates import Calendar
from portal.templating import short_date
from tests.integration.conftest import RunningWorker, SesOutbox, wait_until
from tests.integration.portal_support import PASSWORD, People, PortalClient, sign_in, signed_in
from tocsin.shell.demo_metrology import (
    CALIBRATION_RULE,
    CERTIFICATES,
    certificate_event,
    seed_metrology,
    set_up_metrology,
)

MEMBER = "member@tenant.example"


def local_today(zone: str) -> date:
    return datetime.now(UTC).astimezone(ZoneInfo(zone)).date()


@dataclass(frozen=True)
class Site:
    code: str
    name: str
    zone: str
    tech: str


LONDON = Site("london", "London weighbridge", "Europe/London", "tech.london@demo.example")
AUCKLAND = Site("auckland", "Auckland port scales", "Pacific/Auckland", "tech.auckland@demo.example")


@dataclass
class Desk:
    people: People
    portal: PortalClient
    key: str

    def send(self, external_id: str, site: Site, days: int, status: str = "open",
             due: date | None = None) -> int:
        """A certificate due ``days`` after the site's today, sent through the events API."""
        due = due or local_today(site.zone) + timedelta(days=days)
        event = certificate_event(external_id, f"Instrument {external_id}", site.code, site.name,
                                  site.zone, due, site.tech, status)
        response = self.portal.post("/api/v1/events", json=event,
                                    headers={"Authorization": f"Bearer {self.key}"})
        assert response.status_code == 201, response.text
        return int(response.json()["subject_id"])


@pytest.fixture
def desk(portal: PortalClient, people: People) -> Iterator[Desk]:
    set_up_metrology(people.tenant.slug, PASSWORD)
    with tenant_tx(people.tenant.slug) as tx:
        create_user(tx, MEMBER, Role.MEMBER, PASSWORD)
    yield Desk(people, portal, create_api_key(people.tenant.slug, "metrology host")[1])


def csv_rows(text: str) -> list[dict[str, Any]]:
    return list(csv.DictReader(io.StringIO(text)))


def rows_by_id(desk: Desk, query: str = "") -> dict[str, dict[str, Any]]:
    response = desk.portal.get(f"/obligations.csv{query}")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    return {r["external_id"]: r for r in csv_rows(response.text)}


def test_each_watched_due_date_is_listed_soonest_first_with_its_next_reminder_and_local_date(
    desk: Desk
) -> None:
    desk.send("CAL-LATER", LONDON, 35)  # -30 begins in 5 days
    desk.send("CAL-SOON", LONDON, 3)  # inside the -7 window now
    signed_in(desk.portal, desk.people, desk.people.admin)

    page = desk.portal.get("/obligations")
    assert page.status_code == 200
    html = page.text
    assert html.index("CAL-SOON") < html.index("CAL-LATER")  # soonest due date first
    today = local_today(LONDON.zone)
    later = short_date(today + timedelta(days=5))
    assert f'Goes out on <strong class="when-local">{later}</strong>' in html
    assert "30 days before" in html and "7 days before" in html
    assert "Due now: the next scan sends it" in html
    assert f"{short_date(today + timedelta(days=3))}" in html and "in 3 days" in html


def test_the_next_reminder_is_computed_in_the_sites_own_calendar(desk: Desk) -> None:
    desk.send("CAL-AKL", AUCKLAND, 7)  # the -7 window begins today, Auckland's today
    signed_in(desk.portal, desk.people, desk.people.admin)

    row = rows_by_id(desk)["CAL-AKL"]
    auckland_today = local_today(AUCKLAND.zone)
    assert (row["time_zone"], row["next_milestone"], row["next_state"], row["next_notice_on"]) == \
        (AUCKLAND.zone, "offset:-7", "due", auckland_today.isoformat())
    assert row["due_on"] == (auckland_today + timedelta(days=7)).isoformat() and row["days_left"] == "7"


def test_overdue_obligations_are_marked_and_found_by_the_overdue_filter(desk: Desk) -> None:
    desk.send("CAL-LATE", LONDON, -2)
    desk.send("CAL-FINE", LONDON, 10)
    signed_in(desk.portal, desk.people, desk.people.admin)

    html = desk.portal.get("/obligations").text
    assert "2 days overdue" in html and "row-overdue" in html
    overdue = desk.portal.get("/obligations?overdue=1").text
    assert "CAL-LATE" in overdue and "CAL-FINE" not in overdue
    row = rows_by_id(desk, "?overdue=1")["CAL-LATE"]
    assert (row["overdue"], row["days_left"], row["next_milestone"], row["next_state"]) == \
        ("True", "-2", "offset:0", "due")


def test_filters_narrow_by_product_subject_status_and_due_within_n_days(desk: Desk) -> None:
    desk.send("CAL-3", LONDON, 3)
    desk.send("CAL-20", LONDON, 20)
    desk.send("CAL-LATE", LONDON, -1)
    desk.send("CAL-SHUT", LONDON, 4, status="closed")
    signed_in(desk.portal, desk.people, desk.people.admin)

    assert set(rows_by_id(desk)) == {"CAL-3", "CAL-20", "CAL-LATE", "CAL-SHUT"}
    assert set(rows_by_id(desk, "?within=5")) == {"CAL-3", "CAL-SHUT"}
    assert set(rows_by_id(desk, "?within=5&overdue=1")) == {"CAL-3", "CAL-SHUT", "CAL-LATE"}
    assert set(rows_by_id(desk, "?status=closed")) == {"CAL-SHUT"}
    assert set(rows_by_id(desk, "?product=fraud")) == set()
    page = desk.portal.get("/obligations?within=5&status=open").text
    assert "CAL-3" in page and "CAL-20" not in page and "CAL-SHUT" not in page
    assert desk.portal.get("/obligations?within=soon").status_code == 400


def test_a_subject_whose_conditions_fail_is_shown_as_not_watched(desk: Desk) -> None:
    desk.send("CAL-SHUT", LONDON, 4, status="closed")
    signed_in(desk.portal, desk.people, desk.people.admin)

    row = rows_by_id(desk)["CAL-SHUT"]
    assert row["watching"] == "False" and "subject.status not equals 'closed'" in row["paused_by"]
    assert "Not watched now" in desk.portal.get("/obligations").text


def test_business_day_offsets_skip_the_weekend_and_the_tenants_holidays(desk: Desk) -> None:
    with tenant_tx(desk.people.tenant.slug) as tx:
        create_rule(tx, {**CALIBRATION_RULE, "name": "Report due (working days)",
                         "trigger": {"subject_kind": "certificate",
                                     "due": {"fact": "field.report_due", "offsets": [-2],
                                             "business_days": True}}}, by="test")
    today = local_today(LONDON.zone)
    monday = today + timedelta(days=21 + (7 - today.weekday()) % 7)  # a Monday three weeks on
    assert monday.weekday() == 0
    with tenant_tx(desk.people.tenant.slug) as tx:
        save_calendar(tx, Calendar.of([1, 2, 3, 4, 5], [monday - timedelta(days=3)]))  # Friday off
    event = certificate_event("CAL-WD", "Scale", LONDON.code, LONDON.name, LONDON.zone, monday, LONDON.tech)
    event["subject"]["fields"]["report_due"] = monday.isoformat()
    assert desk.portal.post("/api/v1/events", json=event,
                            headers={"Authorization": f"Bearer {desk.key}"}).status_code == 201
    signed_in(desk.portal, desk.people, desk.people.admin)

    rows = csv_rows(desk.portal.get("/obligations.csv").text)
    [working] = [r for r in rows if r["rule_name"] == "Report due (working days)"]
    # Back from Monday past the weekend and the Friday holiday: Thursday is one working day
    # before, Wednesday two.
    assert working["next_notice_on"] == (monday - timedelta(days=5)).isoformat()
    assert "2 working days before" in desk.portal.get("/obligations").text


def test_values_that_are_not_dates_and_unwatched_products_are_not_obligations(desk: Desk) -> None:
    event = certificate_event("CAL-BAD", "Scale", LONDON.code, LONDON.name, LONDON.zone,
                              local_today(LONDON.zone), LONDON.tech)
    event["subject"]["fields"]["calibration_due"] = "2026-02-30"
    assert desk.portal.post("/api/v1/events", json=event,
                            headers={"Authorization": f"Bearer {desk.key}"}).status_code == 201
    signed_in(desk.portal, desk.people, desk.people.admin)
    assert rows_by_id(desk) == {}
    assert "No obligations yet" in desk.portal.get("/obligations").text


def test_the_csv_is_a_download_of_every_filtered_obligation(desk: Desk) -> None:
    for n in range(3):
        desk.send(f"CAL-{n}", LONDON, 5 + n)
    signed_in(desk.portal, desk.people, desk.people.admin)
    response = desk.portal.get("/obligations.csv?within=6")
    assert 'attachment; filename="tocsin-obligations-' in response.headers["content-disposition"]
    rows = csv_rows(response.text)
    assert [r["external_id"] for r in rows] == ["CAL-0", "CAL-1"]
    assert rows[0]["rule_name"] == CALIBRATION_RULE["name"] and rows[0]["notices_claimed"] == "0"


def test_the_subject_page_shows_every_notice_claimed_delivered_and_acknowledged(
    desk: Desk, worker: RunningWorker, ses: SesOutbox
) -> None:
    subject_id = desk.send("CAL-1", LONDON, 3)  # -7 is due now; -30's window has passed
    run_scan(desk.people.tenant.slug, datetime.now(UTC))  # the clock's scan, as the product runs it
    worker.drain()  # preparation (inbox rows and emails), then delivery to the local SES
    wait_until(lambda: {m.to for m in ses.sent()} >= {LONDON.tech, "manager.london@demo.example"},
               "the reminder emails")
    slug = desk.people.tenant.slug
    with tenant_tx(slug) as tx:
        tech = tx.conn.execute("SELECT id FROM users WHERE email = %s", [LONDON.tech]).fetchone()
        assert tech is not None
        [item], _ = inbox_page(tx, int(str(tech[0])))
        assert item.title.startswith("Calibration of Instrument CAL-1 due ")
        acknowledge(tx, int(str(tech[0])), item.id)
    signed_in(desk.portal, desk.people, desk.people.admin)

    page = desk.portal.get(f"/obligations/subjects/{subject_id}")
    assert page.status_code == 200
    html = page.text
    notices = html[html.index("Every notice about it"):]
    assert "7 days before · Calibration certificate due" in notices
    assert "30 days before · Calibration certificate due" in notices and "Skipped" in notices
    assert f"by {LONDON.tech}" in notices  # acknowledged, and by whom
    assert "2 recipients" in notices and "manager.london@demo.example" in notices
    assert "Not yet" not in notices  # the reminder is delivered and acknowledged
    assert "Never: not sent late" in notices  # the skipped one
    due = local_today(LONDON.zone) + timedelta(days=3)
    watched = html[html.index("Due dates watched"):html.index("Every notice about it")]
    assert f"due {due.day} {due:%B %Y}" in watched and "Window passed" not in watched
    assert watched.count("Notice claimed") == 1 and watched.count("Scheduled") == 2

    row = rows_by_id(desk)["CAL-1"]
    assert (row["notices_claimed"], row["notices_delivered"], row["notices_acknowledged"]) == ("1", "1", "1")
    assert (row["next_milestone"], row["next_notice_on"]) == \
        ("offset:-1", (due - timedelta(days=1)).isoformat())


def test_a_member_sees_obligations_and_a_client_user_does_not(desk: Desk) -> None:
    subject_id = desk.send("CAL-1", LONDON, 3)
    assert sign_in(desk.portal, desk.people.tenant.slug, MEMBER).status_code == 303
    inbox = desk.portal.get("/").text
    assert 'href="/obligations"' in inbox
    assert "CAL-1" in desk.portal.get("/obligations").text
    assert desk.portal.get(f"/obligations/subjects/{subject_id}").status_code == 200
    assert desk.portal.get("/obligations.csv").status_code == 200

    desk.portal.cookies.clear()
    signed_in(desk.portal, desk.people, desk.people.client_user)
    assert 'href="/obligations"' not in desk.portal.get("/").text
    for path in ("/obligations", "/obligations.csv", f"/obligations/subjects/{subject_id}"):
        assert desk.portal.get(path).status_code == 403, path


def test_an_unknown_subject_is_not_found(desk: Desk) -> None:
    signed_in(desk.portal, desk.people, desk.people.admin)
    assert desk.portal.get("/obligations/subjects/999999").status_code == 404


def test_the_metrology_demo_shows_obligations_and_claims_their_first_notices_at_the_first_scan(
    portal: PortalClient, people: People, worker: RunningWorker, ses: SesOutbox
) -> None:
    lines = list(seed_metrology(people.tenant.slug, PASSWORD))
    assert "Legal metrology" in lines[0]
    signed_in(portal, people, people.admin)
    listed = {r["external_id"]: r for r in csv_rows(portal.get("/obligations.csv").text)}
    assert set(listed) == {c[0] for c in CERTIFICATES}
    assert {listed[c[0]]["time_zone"] for c in CERTIFICATES} == \
        {"Europe/London", "Asia/Kolkata", "Pacific/Auckland"}
    assert all(0 <= int(r["days_left"]) <= 40 or r["overdue"] == "True" for r in listed.values())

    run_scan(people.tenant.slug, datetime.now(UTC))
    worker.drain()
    with tenant_tx(people.tenant.slug) as tx:
        claimed = tx.conn.execute(
            "SELECT s.external_id, l.threshold FROM notification_ledger l "
            "JOIN subjects s ON s.id = l.subject_id "
            "WHERE l.subject_kind = 'subject' AND l.status = 'claimed' ORDER BY 1").fetchall()
    # Every certificate inside a window on the first day: on the day (0 and -2 days), -1, -7, -30.
    assert dict(claimed) == {"CAL-A-301": "offset:0", "CAL-K-203": "offset:0", "CAL-K-201": "offset:-1",
                             "CAL-L-101": "offset:-7", "CAL-A-302": "offset:-7", "CAL-K-202": "offset:-30",
                             "CAL-L-102": "offset:-30"}
    wait_until(lambda: {"tech.kolkata@demo.example", "manager.auckland@demo.example"}
               <= {m.to for m in ses.sent()}, "the demo's reminder emails")
