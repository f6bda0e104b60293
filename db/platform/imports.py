"""The one engine of CSV imports, whatever their rows (clients: db/people/client_import.py,
subjects: db/events/subject_import.py, each an ImportWriter).

An upload is staged with its validation report (every problem with its line, column and
reason, nothing written to what it imports yet), then run, all or nothing or, by explicit
choice, the valid rows only. Idempotent by the importer's external id: the writers change
nothing for a row that says what the tenant holds already.

The run is one transaction (all of it commits, or none); its progress is written by short
transactions of their own after each chunk, which the import page polls.

A run holds a lease on its import, renewed by a heartbeat while it runs. A run whose
process died (the web process restarted mid-import) stops renewing it: once the lease has
expired, the import shows as interrupted, and nothing of that run was kept (its transaction
died with it). An administrator then resumes it (the same rows, the same choice) or starts
over (back to the report, to choose again). Each run has its number (attempt): a run that was
given up for dead and comes back finds a later attempt in its place, and rolls back.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from db.evidence.audit import acting_as, current_actor, record_audit
from db.platform.tenancy import TenantTx, tenant_tx
from domain.audit import Actor
from domain.csv_import import ImportKind, ParsedImport, RowProblem
from domain.errors import Conflict, InvalidInput, NotFound
from tocsin.core.clock import utcnow

__all__ = [
    "CHUNK_ROWS",
    "HEARTBEAT_SECONDS",
    "LEASE",
    "ImportJob",
    "ImportWriter",
    "get_import",
    "restart_import",
    "resume_import",
    "run_import",
    "stage_import",
    "start_import",
]

log = logging.getLogger("tocsin.import")

CHUNK_ROWS = 1_000  # rows written between two progress reports
LEASE = timedelta(seconds=60)  # a run not heard from for this long is taken as interrupted
HEARTBEAT_SECONDS = 10.0  # how often a live run renews its lease, whatever its chunks take

R = TypeVar("R")


@dataclass(frozen=True)
class ImportWriter(Generic[R]):
    """What one kind of import does with the tenant's data."""

    kind: ImportKind[R]
    upload_action: str  # the audit action of an upload
    run_action: str  # the audit action of a finished run
    # Problems of valid rows against what the tenant holds, found when the file is staged.
    check: Callable[[TenantTx, list[R]], list[RowProblem]]
    # Write one chunk of staged rows (as kind.plain gave them) in the run's transaction:
    # (created, updated). InvalidInput fails the whole run with its message.
    write: Callable[[TenantTx, list[dict[str, Any]], str], tuple[int, int]]


@dataclass(frozen=True)
class ImportJob:
    id: int
    kind: str
    filename: str
    status: str  # validated, running, interrupted, done, failed
    mode: str | None
    total: int
    valid: int
    problems: list[RowProblem]
    done: int
    result: dict[str, int] | None
    error: str | None
    created_by: str
    created_at: datetime
    attempt: int


def stage_import(tx: TenantTx, writer: ImportWriter[R], filename: str, parsed: ParsedImport[R]) -> int:
    """Keep the upload with its report; nothing is written to what it imports."""
    problems = parsed.problems + writer.check(tx, parsed.rows)
    bad_lines = {p.line for p in problems}
    rows = [writer.kind.plain(r) for r in parsed.rows if getattr(r, "line", None) not in bad_lines]
    problems.sort(key=lambda p: (p.line, p.column))
    row = tx.conn.execute(
        "INSERT INTO imports (kind, filename, total, rows, problems, created_by) "
        "VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
        [writer.kind.name, filename[:200], parsed.total, json.dumps(rows),
         json.dumps([asdict(p) for p in problems]), current_actor().label]).fetchone()
    assert row is not None
    import_id = int(str(row[0]))
    record_audit(tx, writer.upload_action, "import", import_id,
                 after={"filename": filename[:200], "rows": parsed.total, "valid": len(rows),
                        "problems": len(problems)})
    return import_id


def get_import(tx: TenantTx, import_id: int, kind: str) -> ImportJob:
    """The import of this kind (another kind's, or another tenant's: NotFound)."""
    r = tx.conn.execute(
        "SELECT id, kind, filename, stage, mode, total, jsonb_array_length(rows), problems, done, "
        "result, error, created_by, created_at, attempt, lease_until FROM imports "
        "WHERE id = %s AND kind = %s", [import_id, kind]).fetchone()
    if r is None:
        raise NotFound(f"there is no import {import_id}")
    problems = [RowProblem(int(p["line"]), str(p["column"]), str(p["reason"])) for p in r[7]]  # type: ignore[attr-defined]
    status = str(r[3])
    if status == "running" and (r[14] is None or r[14] < utcnow()):  # type: ignore[operator]
        status = "interrupted"
    return ImportJob(int(str(r[0])), str(r[1]), str(r[2]), status, None if r[4] is None else str(r[4]),
                     int(str(r[5])), int(str(r[6])), problems, int(str(r[8])),
                     r[9], None if r[10] is None else str(r[10]), str(r[11]), r[12],  # type: ignore[arg-type]
                     int(str(r[13])))


_CLAIM = ("attempt = attempt + 1, lease_until = %(lease)s, done = 0, error = NULL "
          "WHERE id = %(id)s AND kind = %(kind)s")


def start_import(tx: TenantTx, import_id: int, kind: str, mode: str) -> int:
    """Claim the staged import for a run (a second click finds it running: Conflict); the
    run's attempt number, for run_import."""
    if mode not in ("all", "valid_only"):
        raise InvalidInput("choose to import everything or the valid rows only")
    job = get_import(tx, import_id, kind)
    if mode == "all" and job.problems:
        raise InvalidInput(f"{len(job.problems)} problem(s) in the file: correct them and upload "
                           "it again, or import the valid rows only")
    started = tx.conn.execute(
        f"UPDATE imports SET stage = 'running', mode = %(mode)s, {_CLAIM} AND stage = 'validated' "
        "RETURNING attempt",
        {"mode": mode, "lease": utcnow() + LEASE, "id": import_id, "kind": kind}).fetchone()
    if started is None:
        raise Conflict("this import has been run already")
    return int(str(started[0]))


def _interrupted(tx: TenantTx, import_id: int, kind: str) -> ImportJob:
    job = get_import(tx, import_id, kind)
    if job.status != "interrupted":
        raise Conflict("this import is not interrupted: "
                       + ("it is still running" if job.status == "running" else f"it is {job.status}"))
    return job


def resume_import(tx: TenantTx, import_id: int, kind: str) -> int:
    """Run an interrupted import again, with the same rows and choice (nothing of the
    interrupted run was kept; rows already there are matched by their external id). The
    new run's attempt number."""
    job = _interrupted(tx, import_id, kind)
    row = tx.conn.execute(
        f"UPDATE imports SET {_CLAIM} AND stage = 'running' AND attempt = %(attempt)s "
        "RETURNING attempt",
        {"lease": utcnow() + LEASE, "id": import_id, "kind": kind, "attempt": job.attempt}).fetchone()
    if row is None:
        raise Conflict("this import was resumed or restarted meanwhile")
    record_audit(tx, "import.resume", "import", import_id, before={"attempt": job.attempt},
                 after={"attempt": int(str(row[0])), "mode": job.mode})
    return int(str(row[0]))


def restart_import(tx: TenantTx, import_id: int, kind: str) -> None:
    """An interrupted import back to its validation report, to choose again."""
    job = _interrupted(tx, import_id, kind)
    changed = tx.conn.execute(
        "UPDATE imports SET stage = 'validated', mode = NULL, lease_until = NULL, done = 0, "
        "attempt = attempt + 1 WHERE id = %s AND stage = 'running' AND attempt = %s RETURNING id",
        [import_id, job.attempt]).fetchone()
    if changed is None:
        raise Conflict("this import was resumed or restarted meanwhile")
    record_audit(tx, "import.restart", "import", import_id,
                 before={"attempt": job.attempt, "mode": job.mode}, after={"stage": "validated"})


def _renew(slug: str, import_id: int, attempt: int, done: int | None = None) -> None:
    with tenant_tx(slug) as tx:
        tx.conn.execute("UPDATE imports SET lease_until = %s, done = coalesce(%s, done) "
                        "WHERE id = %s AND attempt = %s AND stage = 'running'",
                        [utcnow() + LEASE, done, import_id, attempt])


def _heartbeat(slug: str, import_id: int, attempt: int, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_SECONDS):
        try:
            _renew(slug, import_id, attempt)
        except Exception as error:  # the next beat tries again; the lease covers a few misses
            log.warning("import %s of tenant %s: heartbeat failed: %s", import_id, slug, error)


def run_import(slug: str, import_id: int, actor: Actor, writer: ImportWriter[Any], attempt: int) -> None:
    """Write a started import (start_import, resume_import) in one transaction, reporting
    progress per chunk and renewing the lease; on any failure nothing is written and the
    import says why."""
    stop = threading.Event()
    threading.Thread(target=_heartbeat, args=(slug, import_id, attempt, stop),
                     name=f"import-{import_id}-heartbeat", daemon=True).start()
    try:
        _run(slug, import_id, actor, writer, attempt)
    except Exception as error:
        log.warning("import %s of tenant %s failed: %s", import_id, slug, error)
        with tenant_tx(slug) as tx:
            tx.conn.execute("UPDATE imports SET stage = 'failed', error = %s, finished_at = now() "
                            "WHERE id = %s AND stage = 'running' AND attempt = %s",
                            [str(error)[:500] if isinstance(error, InvalidInput)
                             else "the import failed; nothing was written", import_id, attempt])
    finally:
        stop.set()


def _run(slug: str, import_id: int, actor: Actor, writer: ImportWriter[Any], attempt: int) -> None:
    with acting_as(actor), tenant_tx(slug) as tx:
        # Not locked: the progress is written to this row by transactions of their own.
        job = tx.conn.execute("SELECT rows FROM imports WHERE id = %s AND stage = 'running' "
                              "AND attempt = %s", [import_id, attempt]).fetchone()
        if job is None:
            return
        rows: list[dict[str, Any]] = job[0]  # type: ignore[assignment]
        created = updated = 0
        for start in range(0, len(rows), CHUNK_ROWS):
            chunk = rows[start:start + CHUNK_ROWS]
            more_created, more_updated = writer.write(tx, chunk, actor.label)
            created += more_created
            updated += more_updated
            _renew(slug, import_id, attempt, start + len(chunk))
        result = {"created": created, "updated": updated, "unchanged": len(rows) - created - updated}
        finished = tx.conn.execute(
            "UPDATE imports SET stage = 'done', done = %s, result = %s, lease_until = NULL, "
            "finished_at = now() WHERE id = %s AND stage = 'running' AND attempt = %s RETURNING id",
            [len(rows), json.dumps(result), import_id, attempt]).fetchone()
        if finished is None:  # given up for dead meanwhile, and resumed or restarted: roll back
            raise Conflict(f"attempt {attempt} of the import was superseded by a later one")
        record_audit(tx, writer.run_action, "import", import_id, after=result)
