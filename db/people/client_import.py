"""Importing clients from a CSV file: staged with its validation report (every problem with
its line, column and reason, nothing written to the clients yet), then run, all or nothing
or, by explicit choice, the valid rows only.

Idempotent by the importer's external id: a row whose client exists with the same values
changes nothing, one whose details differ updates them (a new version), one new creates the
client with its licence. An existing client's expiry date is never moved by an import (a
date is corrected on the client's page, with a reason): such a row is reported.

The run is one transaction (all of it commits, or none); its progress is written by short
transactions of their own after each chunk, which the import page polls.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from db.evidence.audit import acting_as, record_audit
from db.platform.tenancy import TenantTx, tenant_tx
from domain.audit import Actor
from domain.errors import Conflict, InvalidInput, NotFound
from domain.people.client_import import ClientRow, ParsedImport, RowProblem

__all__ = [
    "CHUNK_ROWS",
    "ImportJob",
    "get_import",
    "run_import",
    "stage_import",
    "start_import",
]

log = logging.getLogger("tocsin.import")

CHUNK_ROWS = 1_000  # rows written between two progress reports


@dataclass(frozen=True)
class ImportJob:
    id: int
    filename: str
    status: str  # validated, running, done, failed
    mode: str | None
    total: int
    valid: int
    problems: list[RowProblem]
    done: int
    result: dict[str, int] | None
    error: str | None
    created_by: str
    created_at: datetime


def _existing_date_problems(tx: TenantTx, rows: list[ClientRow]) -> list[RowProblem]:
    found = tx.conn.execute(
        "SELECT external_id, access_expires_on FROM clients WHERE external_id = ANY(%s)",
        [[r.external_id for r in rows]]).fetchall()
    current = {str(r[0]): r[1] for r in found}
    return [RowProblem(r.line, "expires_on",
                       f"client {r.external_id} exists with expiry {current[r.external_id]}: an "
                       "existing client's date is changed on its page, with a reason")
            for r in rows if r.external_id in current and current[r.external_id] != r.expires_on]


def stage_import(tx: TenantTx, filename: str, parsed: ParsedImport) -> int:
    """Keep the upload with its report; nothing is written to the clients."""
    problems = parsed.problems + _existing_date_problems(tx, parsed.rows)
    bad_lines = {p.line for p in problems}
    rows = [r for r in parsed.rows if r.line not in bad_lines]
    problems.sort(key=lambda p: (p.line, p.column))
    row = tx.conn.execute(
        "INSERT INTO imports (kind, filename, total, rows, problems, created_by) "
        "VALUES ('clients', %s, %s, %s, %s, %s) RETURNING id",
        [filename[:200], parsed.total, json.dumps([_plain(r) for r in rows]),
         json.dumps([asdict(p) for p in problems]), _who(tx)]).fetchone()
    assert row is not None
    import_id = int(str(row[0]))
    record_audit(tx, "client_import.upload", "import", import_id,
                 after={"filename": filename[:200], "rows": parsed.total, "valid": len(rows),
                        "problems": len(problems)})
    return import_id


def _who(tx: TenantTx) -> str:
    from db.evidence.audit import current_actor

    return current_actor().label


def _plain(row: ClientRow) -> dict[str, Any]:
    values = asdict(row)
    values["expires_on"] = row.expires_on.isoformat()
    return values


def get_import(tx: TenantTx, import_id: int) -> ImportJob:
    r = tx.conn.execute(
        "SELECT id, filename, stage, mode, total, jsonb_array_length(rows), problems, done, "
        "result, error, created_by, created_at FROM imports WHERE id = %s", [import_id]).fetchone()
    if r is None:
        raise NotFound(f"there is no import {import_id}")
    problems = [RowProblem(int(p["line"]), str(p["column"]), str(p["reason"])) for p in r[6]]  # type: ignore[attr-defined]
    return ImportJob(int(str(r[0])), str(r[1]), str(r[2]), None if r[3] is None else str(r[3]),
                     int(str(r[4])), int(str(r[5])), problems, int(str(r[7])),
                     r[8], None if r[9] is None else str(r[9]), str(r[10]), r[11])  # type: ignore[arg-type]


def start_import(tx: TenantTx, import_id: int, mode: str) -> None:
    """Claim the staged import for one run (a second click finds it running: Conflict)."""
    if mode not in ("all", "valid_only"):
        raise InvalidInput("choose to import everything or the valid rows only")
    job = get_import(tx, import_id)
    if mode == "all" and job.problems:
        raise InvalidInput(f"{len(job.problems)} problem(s) in the file: correct them and upload "
                           "it again, or import the valid rows only")
    started = tx.conn.execute(
        "UPDATE imports SET stage = 'running', mode = %s WHERE id = %s AND stage = 'validated' "
        "RETURNING id", [mode, import_id]).fetchone()
    if started is None:
        raise Conflict("this import has been run already")


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


def _progress(slug: str, import_id: int, done: int) -> None:
    with tenant_tx(slug) as tx:
        tx.conn.execute("UPDATE imports SET done = %s WHERE id = %s", [done, import_id])


def run_import(slug: str, import_id: int, actor: Actor) -> None:
    """Write a started import (start_import) in one transaction, reporting progress per
    chunk; on any failure nothing is written and the import says why."""
    try:
        with acting_as(actor), tenant_tx(slug) as tx:
            # Not locked: the progress is written to this row by transactions of their own.
            job = tx.conn.execute("SELECT rows, total FROM imports WHERE id = %s AND stage = 'running'",
                                  [import_id]).fetchone()
            if job is None:
                return
            rows: list[dict[str, Any]] = job[0]  # type: ignore[assignment]
            created = updated = 0
            for start in range(0, len(rows), CHUNK_ROWS):
                chunk = rows[start:start + CHUNK_ROWS]
                counts = tx.conn.execute(_NEW, {"rows": json.dumps(chunk), "by": actor.label}).fetchone()
                assert counts is not None
                if counts[2]:
                    raise InvalidInput(f"the expiry of {', '.join(counts[2][:5])} changed since the "  # type: ignore[index]
                                       "upload was checked: upload the file again")
                created += int(str(counts[0]))
                updated += int(str(counts[1]))
                _progress(slug, import_id, start + len(chunk))
            result = {"created": created, "updated": updated, "unchanged": len(rows) - created - updated}
            tx.conn.execute("UPDATE imports SET stage = 'done', done = %s, result = %s, "
                            "finished_at = now() WHERE id = %s",
                            [len(rows), json.dumps(result), import_id])
            record_audit(tx, "client.import", "import", import_id, after=result)
    except Exception as error:
        log.warning("import %s of tenant %s failed: %s", import_id, slug, error)
        with tenant_tx(slug) as tx:
            tx.conn.execute("UPDATE imports SET stage = 'failed', error = %s, finished_at = now() "
                            "WHERE id = %s AND stage = 'running'",
                            [str(error)[:500] if isinstance(error, InvalidInput)
                             else "the import failed; nothing was written", import_id])


