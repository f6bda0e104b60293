"""Importing clients from a CSV file (the engine: db/platform/imports.py).

Idempotent by the importer's external id: a row whose client exists with the same values
changes nothing, one whose details differ updates them (a new version), one new creates the
client with its licence. An existing client's expiry date is never moved by an import (a
date is corrected on the client's page, with a reason): such a row is reported.
"""

from __future__ import annotations

import json
from typing import Any

from db.platform.imports import ImportWriter
from db.platform.tenancy import TenantTx
from domain.errors import InvalidInput
from domain.people.client_import import CLIENTS, ClientRow, RowProblem

__all__ = ["CLIENT_IMPORT"]


def _existing_date_problems(tx: TenantTx, rows: list[ClientRow]) -> list[RowProblem]:
    found = tx.conn.execute(
        "SELECT external_id, access_expires_on FROM clients WHERE external_id = ANY(%s)",
        [[r.external_id for r in rows]]).fetchall()
    current = {str(r[0]): r[1] for r in found}
    return [RowProblem(r.line, "expires_on",
                       f"client {r.external_id} exists with expiry {current[r.external_id]}: an "
                       "existing client's date is changed on its page, with a reason")
            for r in rows if r.external_id in current and current[r.external_id] != r.expires_on]


_NEW = """
WITH incoming AS (
    SELECT * FROM json_to_recordset(%(rows)s::json) AS w (
        external_id text, name text, expires_on date, plan text, time_zone text,
        contact_name text, contact_email text, contact_phone text)
), created AS (
    INSERT INTO clients (external_id, name, access_expires_on, plan, time_zone, contact_name,
                         contact_email, contact_phone, updated_by)
    SELECT i.external_id, i.name, i.expires_on, i.plan, i.time_zone, i.contact_name,
           i.contact_email, i.contact_phone, %(by)s
    FROM incoming i WHERE NOT EXISTS (SELECT 1 FROM clients c WHERE c.external_id = i.external_id)
    ORDER BY i.external_id
    RETURNING id, access_expires_on
), events AS (
    INSERT INTO license_events (client_id, event, access_expires_on, actor)
    SELECT id, 'created', access_expires_on, 'import' FROM created
), updated AS (
    UPDATE clients c SET name = i.name, plan = i.plan, time_zone = i.time_zone,
        contact_name = i.contact_name, contact_email = i.contact_email,
        contact_phone = i.contact_phone, version = c.version + 1, updated_at = now(),
        updated_by = %(by)s
    FROM incoming i
    WHERE c.external_id = i.external_id AND c.access_expires_on = i.expires_on
      AND (c.name, c.plan, c.time_zone, c.contact_name, c.contact_email, c.contact_phone)
          IS DISTINCT FROM (i.name, i.plan, i.time_zone, i.contact_name, i.contact_email, i.contact_phone)
    RETURNING c.id
), moved AS (  -- a date changed since the upload was checked
    SELECT i.external_id FROM incoming i JOIN clients c ON c.external_id = i.external_id
    WHERE c.access_expires_on <> i.expires_on
)
SELECT (SELECT count(*) FROM created), (SELECT count(*) FROM updated),
       (SELECT array_agg(external_id) FROM moved)
"""


def _write(tx: TenantTx, chunk: list[dict[str, Any]], by: str) -> tuple[int, int]:
    counts = tx.conn.execute(_NEW, {"rows": json.dumps(chunk), "by": by}).fetchone()
    assert counts is not None
    if counts[2]:
        raise InvalidInput(f"the expiry of {', '.join(counts[2][:5])} changed since the "  # type: ignore[index]
                           "upload was checked: upload the file again")
    return int(str(counts[0])), int(str(counts[1]))


CLIENT_IMPORT: ImportWriter[ClientRow] = ImportWriter(
    kind=CLIENTS, upload_action="client_import.upload", run_action="client.import",
    check=_existing_date_problems, write=_write)
