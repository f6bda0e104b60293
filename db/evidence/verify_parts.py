"""A large chain verified in parts, in processes of their own, all reading the verifier's one
exported snapshot (db/evidence/verify.py).

Python's share of a verification (each record's SHA-256, its payload decoded, every row
compared with the chain's view of it) runs in one thread however many connections read for
it; on a busy machine that thread waits for a CPU most of the time. Split, each part is a
process the operating system schedules on its own:

- *links*, by ranges of sequence numbers: each part checks its records' sequence and links
  (sequence numbers and hashes only, no payloads), starting from the record before its
  range, exactly as one pass over the whole chain would;
- *facts*, by rows: each part takes the records and the rows whose ref falls in it
  (``abs(hashtext(ref)) % parts``), recomputes those records' hashes, builds the chain's view
  of its rows and compares them.

Every record is in exactly one range and one part, and every row in one part, so the parts'
breaks together are those of one pass (a record whose link broke is named for its link only,
as one pass names it). The parent checks the head and the checkpoints.
"""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import msgspec
import psycopg
from psycopg import sql

from db.evidence.verify import FETCH_ROWS, SOURCES, rendered_rows
from domain.evidence.verification import Break, ChainVerifier

__all__ = ["LinkResult", "PartResult", "Snapshot", "check_facts", "check_links", "processes"]

_decode = msgspec.json.Decoder()


@dataclass(frozen=True)
class Snapshot:
    """Where a part reads: the database, the exported snapshot, the tenant's search path."""

    conninfo: str
    snapshot: str
    search_path: str

    def open(self) -> psycopg.Connection[Any]:
        # No prepared statements: the connection may go through PgBouncer.
        conn = psycopg.connect(self.conninfo, autocommit=True, prepare_threshold=None,
                               application_name="tocsin-evidence-verify")
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(self.snapshot)))
        conn.execute("SELECT set_config('search_path', %s, true)", [self.search_path])
        return conn


@dataclass
class LinkResult:
    records: int = 0
    last: tuple[int, str] | None = None  # the range's last record: sequence, hash
    breaks: list[Break] = field(default_factory=list)
    broken: set[int] = field(default_factory=set)  # records whose link broke (their hash aside)


@dataclass
class PartResult:
    rows: int = 0
    pending: int = 0
    breaks: list[Break] = field(default_factory=list)


def check_links(where: Snapshot, low: int, high: int) -> LinkResult:
    """The records with sequence numbers low..high: their hashes and their links."""
    verifier = ChainVerifier(_decode.decode)
    with where.open() as conn:
        before = conn.execute("SELECT seq, hash FROM evidence_chain WHERE seq < %s ORDER BY seq DESC LIMIT 1",
                              [low]).fetchone()
        if before is not None:
            verifier.start_after(int(before[0]), str(before[1]))
        link = verifier.link
        for start in range(low, high + 1, FETCH_ROWS):
            for seq, kind, ref, prev_hash, hash_ in conn.execute(  # no payloads: check_facts hashes
                    "SELECT seq, kind, ref, prev_hash, hash FROM evidence_chain "
                    "WHERE seq BETWEEN %s AND %s ORDER BY seq", [start, min(start + FETCH_ROWS - 1, high)]):
                link(seq, kind, ref, "", prev_hash, hash_, content=False)
    report = verifier.report
    last = (report.head_seq, report.head_hash) if report.records else None
    return LinkResult(report.records, last, report.breaks, verifier.broken_links)


def check_facts(where: Snapshot, part: int, parts: int) -> PartResult:
    """The rows of one part, against what the chain's records (sealed or pending) say of them."""
    verifier = ChainVerifier(_decode.decode)
    with where.open() as conn:
        fact = verifier.fact
        for seq, kind, ref, payload, prev_hash, hash_ in conn.execute(
                "SELECT seq, kind, ref, payload, prev_hash, hash FROM evidence_chain "
                "WHERE abs(hashtext(ref)) %% %s = %s ORDER BY seq", [parts, part]):
            fact(seq, kind, ref, payload, prev_hash, hash_)
        for kind, ref, payload in conn.execute(
                "SELECT p.kind, f.ref, f.payload FROM evidence_pending p, "
                "evidence_facts(p.kind, p.ref, p.payload, p.ids) f "
                "WHERE abs(hashtext(f.ref)) %% %s = %s ORDER BY p.id", [parts, part]):
            verifier.pending(str(kind), str(ref), str(payload))
        for source in SOURCES:
            with conn.cursor() as cur:
                cur.execute(source.partitioned(), [parts, part])
                names = [c.name for c in cur.description or []]
                row_of, table = verifier.row, source.table
                for ref, values in rendered_rows(source, names, cur):
                    row_of(table, ref, values)
    report = verifier.missing_rows([s.table for s in SOURCES])
    return PartResult(report.rows, report.pending, report.breaks)


_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_pool_size = 0


def processes(count: int) -> ProcessPoolExecutor:
    """The processes parts run in, started on first use and kept for the next verification
    (spawned, not forked: the verifier may run in a worker with threads and open connections)."""
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size != count:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn"))
            _pool_size = count
        return _pool
