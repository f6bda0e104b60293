"""The one CSV writer of every export (domain/csv_export.py), against every character that
can start a row or a formula in a spreadsheet, read back with Python's csv module."""

from __future__ import annotations

import csv
import io
from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.csv_export import FORMULA_STARTS, LINE_END, csv_cell, csv_rows

BREAKS = ("\r", "\n", "\r\n")


def read_back(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline=""), strict=True))


def lines_of(cell: str) -> list[str]:
    """The lines a spreadsheet may split a cell into (at CR LF, CR or LF)."""
    return cell.replace("\r\n", "\n").replace("\r", "\n").split("\n")


@pytest.mark.parametrize("start", FORMULA_STARTS)
def test_a_cell_starting_with_a_formula_character_is_defused(start: str) -> None:
    assert csv_cell(f"{start}HYPERLINK(\"http://evil.example\")") == f"'{start}HYPERLINK(\"http://evil.example\")"


@pytest.mark.parametrize("start", FORMULA_STARTS)
@pytest.mark.parametrize("line_break", BREAKS)
def test_a_formula_character_after_a_line_break_inside_a_cell_is_defused(start: str, line_break: str) -> None:
    cell = csv_cell(f"CASE-77{line_break}{start}cmd|' /C calc'!A0")
    assert isinstance(cell, str)
    assert cell == f"CASE-77{line_break}'{start}cmd|' /C calc'!A0"
    assert all(not line.startswith(FORMULA_STARTS) for line in lines_of(cell))


@pytest.mark.parametrize("value", ["CASE-77", "a=b", "x-y", "mail@example.com", "", " =x"])
def test_ordinary_text_is_written_as_it_is(value: str) -> None:
    assert csv_cell(value) == value


def test_numbers_dates_and_nothing_are_plain_cells() -> None:
    assert [csv_cell(v) for v in (-3, 2.5, True, None, date(2027, 1, 2))] == [-3, 2.5, True, "", "2027-01-02"]


@pytest.mark.parametrize("special", ["\r", "\n", "\r\n", ",", '"'])
def test_a_cell_with_a_line_break_the_separator_or_a_quote_is_quoted_and_stays_one_cell(special: str) -> None:
    text = "".join(csv_rows(["id", "note"], [[1, f"before{special}after"], [2, "plain"]]))
    assert text.endswith(LINE_END) and text.count(LINE_END) >= 3
    assert f'"before{special.replace(chr(34), chr(34) * 2)}after"' in text
    assert read_back(text) == [["id", "note"], ["1", f"before{special}after"], ["2", "plain"]]


def test_every_line_ends_with_cr_lf() -> None:
    text = "".join(csv_rows(["a"], [["x"], ["y"]]))
    assert text == "a\r\nx\r\ny\r\n"


def test_the_carriage_return_attack_stays_in_its_own_row_without_a_formula() -> None:
    attack = 'CASE-77\r=HYPERLINK("http://evil.example","open me")'
    rows = read_back("".join(csv_rows(["external_id", "title"], [[attack, "A case"], ["CASE-78", "next"]])))
    assert len(rows) == 3
    assert rows[1] == ['CASE-77\r\'=HYPERLINK("http://evil.example","open me")', "A case"]
    assert rows[2] == ["CASE-78", "next"]


CELL = st.text(st.sampled_from([*FORMULA_STARTS, "\n", ",", '"', "a", "1", " ", "é"]), max_size=12)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.lists(CELL, min_size=3, max_size=3), max_size=6))
def test_any_cells_read_back_row_for_row_with_no_line_starting_a_formula(rows: list[list[str]]) -> None:
    parsed = read_back("".join(csv_rows(["a", "b", "c"], rows)))
    assert len(parsed) == len(rows) + 1
    for written, read in zip(rows, parsed[1:], strict=True):
        assert len(read) == 3
        for original, cell in zip(written, read, strict=True):
            assert all(not line.startswith(FORMULA_STARTS) for line in lines_of(cell)), (original, cell)
            assert cell.replace("'", "") == original.replace("'", "")  # only apostrophes added
