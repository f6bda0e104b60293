"""Reading a CSV file of clients for import: the file's shape (UTF-8, the template's
columns, a size and row limit) is refused outright with a message that says what to fix;
each row is then checked on its own, and every problem is reported with its line, column and
reason before anything is written."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import date

from domain.errors import InvalidInput
from domain.people.contacts import valid_contacts
from domain.people.identity import valid_name, valid_plan, valid_zone

__all__ = [
    "COLUMNS",
    "MAX_BYTES",
    "MAX_ROWS",
    "REQUIRED",
    "ClientRow",
    "ParsedImport",
    "RowProblem",
    "parse_client_csv",
    "template_csv",
]

COLUMNS = ("external_id", "name", "expires_on", "plan", "time_zone", "contact_name",
           "contact_email", "contact_phone")
REQUIRED = ("external_id", "name", "expires_on")
MAX_BYTES = 8 * 1024 * 1024  # bytes of one upload: ~60,000 rows of the template's shape
MAX_ROWS = 50_000  # data rows of one upload
EXTERNAL_ID_MAX_LENGTH = 200  # characters


@dataclass(frozen=True)
class RowProblem:
    line: int  # the file's line number (the header is line 1)
    column: str
    reason: str


@dataclass(frozen=True)
class ClientRow:
    line: int
    external_id: str
    name: str
    expires_on: date
    plan: str
    time_zone: str | None
    contact_name: str
    contact_email: str
    contact_phone: str


@dataclass(frozen=True)
class ParsedImport:
    total: int
    rows: list[ClientRow]
    problems: list[RowProblem]


def template_csv() -> str:
    """The header and one example row, for people to fill in."""
    return (",".join(COLUMNS) + "\r\n"
            + "ACME-001,Acme Assurance,2031-06-30,standard,Europe/Paris,Inès Martin,"
              "ines@acme.example,+33 1 23 45 67 89\r\n")


def _text(data: bytes) -> str:
    if len(data) > MAX_BYTES:
        raise InvalidInput(f"the file is {len(data) / 1_048_576:.1f} MB; at most "
                           f"{MAX_BYTES // 1_048_576} MB in one upload: split it")
    if not data.strip():
        raise InvalidInput("the file is empty: download the template and fill it in")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InvalidInput(f"the file is not UTF-8 text (byte {error.start + 1} cannot be read): "
                           "save it as “CSV UTF-8” and upload it again") from None


def parse_client_csv(data: bytes) -> ParsedImport:
    text = _text(data)
    if "\x00" in text:
        raise InvalidInput("the file holds NUL characters: it is not a CSV text file")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [h.strip().lower() for h in next(reader)]
    except (StopIteration, csv.Error):
        raise InvalidInput("the file has no header line: download the template") from None
    missing = [c for c in REQUIRED if c not in header]
    unknown = [c for c in header if c not in COLUMNS]
    if missing or unknown or len(set(header)) != len(header):
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if unknown:
            parts.append(f"unknown {', '.join(u[:40] or '(empty)' for u in unknown[:5])}")
        if len(set(header)) != len(header):
            parts.append("a column twice")
        raise InvalidInput(f"the header does not match the template ({'; '.join(parts)}): the "
                           f"columns are {', '.join(COLUMNS)}")
    rows: list[ClientRow] = []
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
            row = _row(line, dict(zip(header, values, strict=True)), problems)
            if row is None:
                continue
            if row.external_id in seen:
                problems.append(RowProblem(line, "external_id",
                                           f"the same external id as line {seen[row.external_id]}"))
                continue
            seen[row.external_id] = line
            rows.append(row)
    except csv.Error as error:
        raise InvalidInput(f"line {reader.line_num} is not valid CSV ({error}): check its quotes") from None
    if total == 0:
        raise InvalidInput("the file has a header but no rows")
    return ParsedImport(total, rows, problems)


def _row(line: int, cells: dict[str, str], problems: list[RowProblem]) -> ClientRow | None:
    found: list[RowProblem] = []

    def check(column: str, read: object) -> object:
        try:
            return read() if callable(read) else read
        except (InvalidInput, ValueError) as error:
            found.append(RowProblem(line, column, str(error) or "not valid"))
            return None

    get = {c: cells.get(c, "").strip() for c in COLUMNS}
    external_id = get["external_id"]
    if not external_id or len(external_id) > EXTERNAL_ID_MAX_LENGTH:
        found.append(RowProblem(line, "external_id", f"1 to {EXTERNAL_ID_MAX_LENGTH} characters"))
    name = check("name", lambda: valid_name(get["name"], "client name"))
    expires = check("expires_on", lambda: _date(get["expires_on"]))
    plan = check("plan", lambda: valid_plan(get["plan"] or "standard"))
    zone = check("time_zone", lambda: valid_zone(get["time_zone"]) if get["time_zone"] else None)
    contacts = None
    try:
        contacts = valid_contacts(get["contact_name"], get["contact_email"], get["contact_phone"])
    except InvalidInput as error:
        column = "contact_email" if "email" in str(error) else \
            "contact_phone" if "phone" in str(error) else "contact_name"
        found.append(RowProblem(line, column, str(error)))
    if found:
        problems.extend(found)
        return None
    assert isinstance(name, str) and isinstance(expires, date) and contacts is not None
    return ClientRow(line, external_id, name, expires, str(getattr(plan, "value", plan)),
                     zone if isinstance(zone, str) else None, contacts.name, contacts.email,
                     contacts.phone)


def _date(text: str) -> date:
    if not text:
        raise InvalidInput("required: the licence's expiry date, YYYY-MM-DD")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"{text[:20]!r} is not a date: write it YYYY-MM-DD") from None
