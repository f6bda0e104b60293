"""A CSV row of subjects is read as the subject form is: problems land in the column at
fault, pairs are separated by semicolons, and a row that says what the subject holds (its
empty title, time zone and status keeping the subject's) is the same subject."""

from __future__ import annotations

from domain.csv_import import RowProblem
from domain.events.manual import ManualSubject
from domain.events.subject_import import merged_row, parse_subject_csv, same_subject, template_csv


def test_each_problem_is_reported_in_its_column() -> None:
    parsed = parse_subject_csv(
        b"kind,external_id,due_on,assignees,fields\r\n"
        b"Permit!,P-1,2031-01-01,,\r\n"
        b"permit,P-2,31/01/2031,,\r\n"
        b"permit,P-3,,not-an-email,\r\n"
        b"permit,P-4,,,site Harbour\r\n"
        b"permit,P-5,,,site = Harbour; capacity = 12\r\n"
        b"permit,P-5,,,\r\n")
    assert [(p.line, p.column) for p in parsed.problems] == [
        (2, "kind"), (3, "due_on"), (4, "assignees"), (5, "fields"), (7, "external_id")]
    assert parsed.problems[-1] == RowProblem(7, "external_id", "the same external id as line 6")
    (row,) = parsed.rows
    assert row.subject.fields == "site = Harbour\ncapacity = 12"


def test_the_template_is_valid() -> None:
    parsed = parse_subject_csv(template_csv().encode())
    assert parsed.problems == [] and len(parsed.rows) == 1


def test_a_row_leaving_out_what_an_update_cannot_take_away_is_the_same_subject() -> None:
    current = ManualSubject("permit", "P-1", "Boiler permit", "2031-05-31", "Europe/Paris", "in_review",
                            "ana@example.com, ben@example.com", "region = north", "site = Harbour")
    row = ManualSubject("permit", "P-1", "", "2031-05-31", "", "", "ben@example.com ana@example.com",
                        "", "site = Harbour")
    assert same_subject(current, merged_row(current, row))
    changed = ManualSubject("permit", "P-1", "", "2031-05-31", "", "", "ana@example.com", "", "")
    assert not same_subject(current, merged_row(current, changed))
