"""The clients' kind of CSV import (domain/csv_import.py reads the file): the template's
columns, and one row checked as the client form checks it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import date
from typing import Any

from domain.csv_import import (
    EXTERNAL_ID_MAX_LENGTH,
    MAX_BYTES,
    MAX_ROWS,
    ImportKind,
    ParsedImport,
    RowProblem,
    check_external_id,
    parse_csv,
)
from domain.errors import InvalidInput
from domain.people.contacts import valid_contacts
from domain.people.identity import valid_name, valid_plan, valid_zone

__all__ = [
    "CLIENTS",
    "COLUMNS",
    "EXTERNAL_ID_MAX_LENGTH",
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


def template_csv() -> str:
    """The header and one example row, for people to fill in."""
    return (",".join(COLUMNS) + "\r\n"
            + "ACME-001,Acme Assurance,2031-06-30,standard,Europe/Paris,Inès Martin,"
              "ines@acme.example,+33 1 23 45 67 89\r\n")


def _row(line: int, get: Mapping[str, str]) -> ClientRow | list[RowProblem]:
    found: list[RowProblem] = check_external_id(line, get["external_id"])

    def check(column: str, read: object) -> object:
        try:
            return read() if callable(read) else read
        except (InvalidInput, ValueError) as error:
            found.append(RowProblem(line, column, str(error) or "not valid"))
            return None

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
        return found
    assert isinstance(name, str) and isinstance(expires, date) and contacts is not None
    return ClientRow(line, get["external_id"], name, expires, str(getattr(plan, "value", plan)),
                     zone if isinstance(zone, str) else None, contacts.name, contacts.email,
                     contacts.phone)


def _date(text: str) -> date:
    if not text:
        raise InvalidInput("required: the licence's expiry date, YYYY-MM-DD")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"{text[:20]!r} is not a date: write it YYYY-MM-DD") from None


def _plain(row: ClientRow) -> dict[str, Any]:
    return asdict(row) | {"expires_on": row.expires_on.isoformat()}


CLIENTS: ImportKind[ClientRow] = ImportKind(
    name="clients", columns=COLUMNS, required=REQUIRED, read=_row,
    key=lambda row: row.external_id, plain=_plain, template=template_csv())


def parse_client_csv(data: bytes) -> ParsedImport[ClientRow]:
    return parse_csv(CLIENTS, data)
