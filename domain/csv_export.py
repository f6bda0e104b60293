"""CSV for spreadsheets: every export (the ledger, the obligations, `tocsin ledger --csv`)
writes its rows through ``csv_rows``, so a value a host or a tenant wrote (an external id, a
title, a client's name) can never become a row of its own or a formula in the reader's
spreadsheet:
- a cell holding a carriage return, a line feed, the separator or a quote is quoted (the
  line terminator is CR LF, so the csv module quotes both line-break characters; a bare CR
  left unquoted started a new row in a spreadsheet);
- a cell, or any line inside a cell, that starts with a formula character (= + - @, tab,
  CR) gets a leading apostrophe: a spreadsheet that splits a quoted cell at its line breaks
  (or one pasted line by line) still finds no formula at the start of any line.
Numbers, dates and booleans are written as they are (a negative number stays a number).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import date, datetime

__all__ = ["FORMULA_STARTS", "LINE_END", "csv_cell", "csv_rows"]

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
LINE_END = "\r\n"  # RFC 4180's
# A position where a spreadsheet may start reading a formula: the cell's start, or just
# after a line break (CR LF, CR or LF) inside it, when a formula character follows.
_FORMULA_AT_LINE_START = re.compile(r"(?:^|(?<=\r\n)|(?<=\r)(?!\n)|(?<=\n))(?=[=+\-@\t\r])")


def csv_cell(value: object) -> object:
    """One value as a safe CSV cell (quoting is the writer's)."""
    if value is None:
        return ""
    if isinstance(value, date | datetime):
        return value.isoformat()
    if isinstance(value, str):
        return _FORMULA_AT_LINE_START.sub("'", value)
    return value


def csv_rows(header: Sequence[str], rows: Iterable[Iterable[object]]) -> Iterator[str]:
    """The header, then one CSV line per row (each cell made safe by csv_cell), produced as
    the rows arrive: a streamed export never holds more than one row."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=LINE_END, quoting=csv.QUOTE_MINIMAL)

    def line(values: Iterable[object]) -> str:
        writer.writerow(values)
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    yield line(header)
    for row in rows:
        yield line(csv_cell(value) for value in row)
