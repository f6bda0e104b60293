"""Reading a CSV file for import, whatever its rows describe (clients, subjects): the file's
shape (UTF-8, the template's columns, a size and row limit) is refused outright with a
message that says what to fix; each row is then read by its kind (ImportKind.read) on its
own, and every problem is reported with its line, column and reason before anything is
written. Two rows with the same key (the importer's external id) are a problem of the later
one: a file says one thing about each thing it imports."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from domain.errors import InvalidInput

__all__ = [
    "EXTERNAL_ID_MAX_LENGTH",
    "MAX_BYTES",
    "MAX_ROWS",
    "ImportKind",
    "ParsedImport",
    "RowProblem",
    "check_external_id",
    "parse_csv",
]

MAX_BYTES = 8 * 1024 * 1024  # bytes of one upload: ~60,000 rows of the clients' template
MAX_ROWS = 50_000  # data rows of one upload
EXTERNAL_ID_MAX_LENGTH = 200  # characters

R = TypeVar("R")


@dataclass(frozen=True)
class RowProblem:
    line: int  # the file's line number (the header is line 1)
    column: str
    reason: str


@dataclass(frozen=True)
class ParsedImport(Generic[R]):
    total: int
    rows: list[R]
    problems: list[RowProblem]


@dataclass(frozen=True)
class ImportKind(Generic[R]):
    """What one kind of import reads: its columns, and how one row becomes a value."""

    name: str  # the imports table's kind: clients, subjects
    columns: tuple[str, ...]
    required: tuple[str, ...]
    # (line, the row's cells by column, stripped) -> the row, or its problems
    read: Callable[[int, Mapping[str, str]], R | list[RowProblem]]
    key: Callable[[R], str]  # what makes two rows the same thing (reported on external_id)
    plain: Callable[[R], dict[str, Any]]  # the row as JSON, as it is kept until the run
    template: str  # the header and an example row


def check_external_id(line: int, value: str) -> list[RowProblem]:
    if not value or len(value) > EXTERNAL_ID_MAX_LENGTH:
        return [RowProblem(line, "external_id", f"1 to {EXTERNAL_ID_MAX_LENGTH} characters")]
    return []


def _text(data: bytes) -> str:
    if len(data) > MAX_BYTES:
        raise InvalidInput(f"the file is {len(data) / 1_048_576:.1f} MB; at most "
                           f"{MAX_BYTES // 1_048_576} MB in one upload: split it")
    if not data.strip():
        raise InvalidInput("the file is empty: download the template and fill it in")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InvalidInput(f"the file is not UTF-8 text (byte {error.start + 1} cannot be read): "
                           "save it as “CSV UTF-8” and upload it again") from None
    if "\x00" in text:
        raise InvalidInput("the file holds NUL characters: it is not a CSV text file")
    return text


def _header(kind: ImportKind[Any], reader: Any) -> list[str]:
    try:
        header = [h.strip().lower() for h in next(reader)]
    except (StopIteration, csv.Error):
        raise InvalidInput("the file has no header line: download the template") from None
    missing = [c for c in kind.required if c not in header]
    unknown = [c for c in header if c not in kind.columns]
    if missing or unknown or len(set(header)) != len(header):
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if unknown:
            parts.append(f"unknown {', '.join(u[:40] or '(empty)' for u in unknown[:5])}")
        if len(set(header)) != len(header):
            parts.append("a column twice")
        raise InvalidInput(f"the header does not match the template ({'; '.join(parts)}): the "
                           f"columns are {', '.join(kind.columns)}")
    return header


def parse_csv(kind: ImportKind[R], data: bytes) -> ParsedImport[R]:
    reader = csv.reader(io.StringIO(_text(data), newline=""))
    header = _header(kind, reader)
    rows: list[R] = []
    problems: list[RowProblem] = []
    seen: dict[str, int] = {}
    total = 0
    try:
        for values in reader:
            line = reader.line_num
            if not any(v.strip() for v in values):
                continue
            total += 1
            if total > MAX_ROWS:
                raise InvalidInput(f"the file has more than {MAX_ROWS:,} rows: split it")
            if len(values) != len(header):
                problems.append(RowProblem(line, "", f"{len(values)} values for {len(header)} columns"))
                continue
            cells = dict.fromkeys(kind.columns, "") | {
                c: v.strip() for c, v in zip(header, values, strict=True)}
            row = kind.read(line, cells)
            if isinstance(row, list):
                problems.extend(row)
                continue
            key = kind.key(row)
            if key in seen:
                problems.append(RowProblem(line, "external_id", f"the same external id as line {seen[key]}"))
                continue
            seen[key] = line
            rows.append(row)
    except csv.Error as error:
        raise InvalidInput(f"line {reader.line_num} is not valid CSV ({error}): check its quotes") from None
    if total == 0:
        raise InvalidInput("the file has a header but no rows")
    return ParsedImport(total, rows, problems)
