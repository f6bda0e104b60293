"""The evidence pages: the ledger filtered by rule, subject, milestone, claim dates and status,
each claim with its delivery attempts, the CSV export streamed in bounded memory, stuck claims
and failed or unknown deliveries, all for administrators only."""

from __future__ import annotations

import csv
import io
import os
import re
import tracemalloc
from datetime import timedelta
from typing import Any

import anyio
import pytest

from db.evidence.ledger_view import stuck_claims
from db.notices.rule_notices import PreparationFailed, prepare_rule_claims, record_preparation_failure
from db.platform.tenancy import tenant_tx
from tests.integration.builders import scalar
from tests.integration.platform_builders import add_product, add_rule, add_subject, fire
from tests.integration.portal_support import (
    People,
    PortalClient,
    local_today,
    notification_ids,
    signed_in,
)

EXPORT_ROWS = int(os.environ.get("TOCSIN_TEST_EXPORT_ROWS", "100000"))


def add_history(people: People) -> None:
    """Old claims beside the fixture's (Northwind: d30 and d14 skipped, d7 claimed, all today):
    a skipped d30 and a delivered d14 of last month for Summit Energy, the d14 with a retried
    then accepted attempt."""
    with tenant_tx(people.tenant.slug) as tx:
        tx.conn.execute(
            """
            INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on, status,
                                             status_reason, local_date, claimed_at, delivered_at)
            VALUES ('licence', 'client', %(other)s, 'd30', %(due)s, 'skipped', 'a later window had begun',
                    %(due)s - 30, now() - interval '40 days', NULL),
                   ('licence', 'client', %(other)s, 'd14', %(due)s, 'claimed', NULL,
                    %(due)s - 14, now() - interval '35 days', now() - interval '35 days')
            """,
            {"other": people.other_client.id, "due": local_today(people.tenant) - timedelta(days=20)},
        )
        tx.conn.execute(
            """
            WITH n AS (
                INSERT INTO notifications
                    (recipient_user_id, ledger_id, category, title, body, idempotency_key)
                SELECT %(user)s, id, 'license_expiring', 'Summit Energy: two weeks', '-', 'history'
                FROM notification_ledger WHERE threshold = 'd14' AND subject_id = %(other)s RETURNING id
            ), d AS (
                INSERT INTO notification_deliveries (notification_id, channel, status, attempts, last_error)
                SELECT id, 'email', 'accepted', 2, NULL FROM n RETURNING id
            )
            INSERT INTO delivery_attempts (delivery_id, attempt_no, claim_token, ended_at, outcome, error)
            SELECT d.id, a.no, gen_random_uuid(), now(), a.outcome, a.error
            FROM d, (VALUES (1, 'retry', 'Throttling: rate exceeded'), (2, 'accepted', NULL))
                 AS a(no, outcome, error)
            """,
            {"user": people.other_client_user.id, "other": people.other_client.id},
        )


def test_the_ledger_shows_each_claim_with_its_times_and_attempts(
    portal: PortalClient, people: People
) -> None:
    add_history(people)
    signed_in(portal, people, people.admin)

    page = portal.get("/ledger")

    assert page.status_code == 200
    text = page.text
    assert "Northwind Analytics · 7 days before expiry" in text
    assert "Summit Energy · 14 days before expiry" in text and "Summit Energy · 30 days before expiry" in text
    assert "Skipped" in text and "a later window had begun" in text
    assert "Failed, retried · Throttling: rate exceeded" in text and "#2" in text
    assert "Accepted by the mail service" in text
    assert "grid@summit.example" in text  # who each delivery was for
    assert ">d14<" not in text and ">d7<" not in text  # no internal codes on the page


def test_the_ledger_filters_by_rule_subject_milestone_dates_and_status(
    portal: PortalClient, people: People
) -> None:
    add_history(people)
    signed_in(portal, people, people.admin)
    today = local_today(people.tenant)

    def shown(**params: str) -> set[str]:
        page = portal.get("/ledger", params=params)
        assert page.status_code == 200, params
        return {h.split(" · ")[0].split()[0] + " " + h.split(" · ")[1].split()[0]
                for h in re.findall(r'<div class="ledger-head">\s*<h2>([^<]+)</h2>', page.text)}

    northwind = {"Northwind 30", "Northwind 14", "Northwind 7"}
    summit = {"Summit 30", "Summit 14"}
    assert shown() == northwind | summit
    assert shown(rule="licence") == northwind | summit
    assert shown(subject=str(people.other_client.id)) == summit
    assert shown(threshold="d14") == {"Northwind 14", "Summit 14"}
    assert shown(status="skipped") == {"Northwind 30", "Northwind 14", "Summit 30"}
    assert shown(status="delivered") == {"Summit 14"}
    assert shown(status="undelivered") == {"Northwind 7"}
    assert shown(**{"from": today.isoformat(), "to": today.isoformat()}) == northwind
    assert shown(**{"to": (today - timedelta(days=36)).isoformat()}) == {"Summit 30"}
    assert shown(subject=str(people.other_client.id), status="skipped") == {"Summit 30"}
    assert shown(rule="no-such-rule") == set()
    for bad in ({"status": "lost"}, {"from": "yesterday"}, {"subject": "x"},
                {"from": today.isoformat(), "to": (today - timedelta(days=1)).isoformat()}):
        assert portal.get("/ledger", params=bad).status_code == 400, bad


def test_the_csv_export_holds_the_filtered_set(portal: PortalClient, people: People) -> None:
    add_history(people)
    signed_in(portal, people, people.admin)

    response = portal.get("/ledger.csv", params={"subject": str(people.other_client.id)})

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert [(r["threshold"], r["status"]) for r in rows] == [("d30", "skipped"), ("d14", "claimed")]
    assert {r["subject_name"] for r in rows} == {"Summit Energy"}
    assert rows[1]["emails_accepted"] == "1" and rows[1]["delivered_at"]


def test_an_acknowledgement_is_in_the_ledger_and_the_export(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.admin)
    [notice] = notification_ids(people.tenant, people.admin)
    token = html.split('name="_csrf_token" value="')[1].split('"')[0]
    portal.post(f"/notifications/{notice}/acknowledge", data={"_csrf_token": token})

    page = portal.get("/ledger", params={"status": "acknowledged"})
    export = list(csv.DictReader(io.StringIO(portal.get("/ledger.csv").text)))

    assert "by admin@tenant.example" in page.text
    assert [(r["threshold"], r["acknowledged_by"]) for r in export if r["acknowledged_at"]] == [
        ("d7", "admin@tenant.example")]


def test_a_formula_in_a_client_name_is_defused_in_the_export(portal: PortalClient, people: People) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        tx.conn.execute("UPDATE clients SET name = '=HYPERLINK(\"http://x\")' WHERE id = %s",
                        [people.client.id])
    signed_in(portal, people, people.admin)

    rows = list(csv.DictReader(io.StringIO(portal.get("/ledger.csv").text)))

    assert {row["subject_name"] for row in rows} == {"'=HYPERLINK(\"http://x\")"}


def test_stuck_claims_and_troubled_deliveries_need_attention(portal: PortalClient, people: People) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        # The live d7 claim is an hour old and its two emails never left: stuck.
        tx.conn.execute("UPDATE notification_ledger SET claimed_at = now() - interval '1 hour'")
        # A claim whose recipients had all gone: no delivery was ever written.
        tx.conn.execute(
            "INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on, "
            "local_date, claimed_at) VALUES ('licence', 'client', %s, 'd30', current_date + 30, "
            "current_date, now() - interval '2 hours')", [people.other_client.id])
        # A fresh claim is not stuck yet.
        tx.conn.execute(
            "INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on, "
            "local_date) VALUES ('licence', 'client', %s, 'd14', current_date + 14, current_date)",
            [people.other_client.id])
        stuck = stuck_claims(tx, timedelta(minutes=30))
        one_id = scalar(people.tenant, "SELECT min(id) FROM notification_deliveries")
        # Through sending, as a worker would: PostgreSQL allows only the state machine's moves.
        tx.conn.execute("UPDATE notification_deliveries SET status = 'sending'")
        tx.conn.execute("UPDATE notification_deliveries SET status = 'failed', attempts = 5, last_error "
                        "= 'MessageRejected: Email address is not verified' WHERE id = %s", [one_id])
        tx.conn.execute("UPDATE notification_deliveries SET status = 'unknown', attempts = 1, "
                        "last_error = 'ReadTimeout after send' WHERE id <> %s", [one_id])

    assert [(s.threshold, s.deliveries, s.waiting) for s in stuck] == [("d30", 0, 0), ("d7", 2, 2)]
    signed_in(portal, people, people.admin)
    page = portal.get("/ledger/attention")
    assert page.status_code == 200
    assert "Failed after 5 attempts" in page.text and "Email address is not verified" in page.text
    assert "Outcome unknown after 1 attempt" in page.text and "ReadTimeout after send" in page.text
    # Once nothing is pending, the d7 claim is no longer "waiting to be sent": it is listed
    # with its failed and unknown deliveries instead.
    assert "Summit Energy · 30 days before expiry" in page.text
    assert "No delivery was written" in page.text
    assert "Northwind Analytics · 7 days before expiry" not in page.text


def test_a_rule_notice_that_could_not_be_prepared_needs_attention(
    portal: PortalClient, people: People
) -> None:
    product = add_product(people.tenant)
    subject = add_subject(people.tenant, product, "C-404", title="Wire fraud in Hull")
    rule = add_rule(people.tenant, product, "Big wire", recipients=[{"type": "nobody"}])
    claim = fire(people.tenant, rule, subject)
    for _ in range(2):
        with pytest.raises(PreparationFailed) as failed, tenant_tx(people.tenant.slug) as tx:
            prepare_rule_claims(tx, [claim])
        record_preparation_failure(people.tenant.slug, claim, failed.value.reason, max_attempts=2)

    signed_in(portal, people, people.admin)
    page = portal.get("/ledger/attention")

    assert page.status_code == 200
    assert "Big wire" in page.text and "Wire fraud in Hull" in page.text and "fraud · case C-404" in page.text
    assert "unknown recipient type" in page.text
    assert re.search(r"<span class=\"value\">2, the last on", page.text)


def test_a_rule_notice_sent_with_the_default_template_needs_attention(
    portal: PortalClient, people: People
) -> None:
    product = add_product(people.tenant)
    subject = add_subject(people.tenant, product, "C-405", title="Card skimming in York")
    rule = add_rule(people.tenant, product, "Skimming", recipients=[{"type": "assignees"}],
                    title="{% for i in (1..100000000) %}{{ i }}{% endfor %}")
    with tenant_tx(people.tenant.slug) as tx:
        prepare_rule_claims(tx, [fire(people.tenant, rule, subject)])

    signed_in(portal, people, people.admin)
    page = portal.get("/ledger/attention")

    assert page.status_code == 200
    section = page.text.split('id="defaulted-title"')[1].split("</section>")[0]
    assert "Skimming" in section and "Card skimming in York" in section and f'href="/rules/{rule}"' in section
    assert "title template was refused: range limit reached" in section


def test_evidence_pages_are_for_administrators_only(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.client_user)

    for path in ("/ledger", "/ledger.csv", "/ledger/attention"):
        assert portal.get(path).status_code == 404, path


def test_exporting_100000_claims_streams_in_bounded_memory(portal: PortalClient, people: People) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        tx.conn.execute(
            """
            INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on,
                                             status, local_date, claimed_at)
            SELECT 'licence', 'client', 1000000 + g, 'd30', DATE '2027-01-01' + (g %% 300),
                   'claimed', DATE '2026-12-01', now() - make_interval(secs => g)
            FROM generate_series(1, %s) AS g
            """,
            [EXPORT_ROWS],
        )
    signed_in(portal, people, people.admin)
    cookie = "; ".join(f"{name}={value}" for name, value in portal.cookies.items())
    received = {"bytes": 0, "lines": 0, "status": 0, "chunks": 0}

    async def download() -> None:
        """GET /ledger.csv through the ASGI app, dropping each chunk as it arrives, so what
        is measured is the server's memory, not a buffered body."""
        scope: dict[str, Any] = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
            "scheme": "http", "path": "/ledger.csv", "raw_path": b"/ledger.csv", "query_string": b"",
            "root_path": "", "headers": [(b"host", b"testserver.local"), (b"cookie", cookie.encode())],
            "client": ("127.0.0.1", 50000), "server": ("testserver.local", 80),
        }

        requested, finished = False, anyio.Event()

        async def receive() -> dict[str, Any]:
            nonlocal requested
            if requested:  # like a server: a disconnect once the response is complete
                await finished.wait()
                return {"type": "http.disconnect"}
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                received["status"] = message["status"]
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                received["bytes"] += len(body)
                received["lines"] += body.count(b"\n")
                received["chunks"] += 1
                if not message.get("more_body", False):
                    finished.set()

        await portal.app(scope, receive, send)  # type: ignore[arg-type]

    tracemalloc.start()
    try:
        baseline, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        portal.blocking_portal.call(download)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert received["status"] == 200
    assert received["lines"] == 1 + EXPORT_ROWS + 3  # the header, the rows, the fixture's 3 claims
    assert received["chunks"] > 100  # written as it is read, not in one piece
    grew = peak - baseline
    print(f"CSV export: {received['bytes'] / 1e6:.1f} MB in {received['chunks']} chunks, "
          f"peak Python memory growth {grew / 1e6:.2f} MB")
    assert grew < received["bytes"] / 4, "the export seems to be built in memory"
