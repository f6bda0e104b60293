"""Recomputing a tenant's evidence chain and comparing each chained row with the chain's view
of it (domain/evidence/verification.py), in one consistent snapshot.

Read-only: ``verify_tenant`` opens a REPEATABLE READ, READ ONLY transaction of its own, so
the chain, its pending facts and the rows it names are read as of one instant while sealers
and writers go on.

Most of a verification's time is PostgreSQL's: reading the chain and rendering the rows. So
the snapshot is exported (``pg_export_snapshot``) and READERS connections of the verification's
own, each in a transaction that imports it, read the chain in ranges of FETCH_ROWS records and
the tables in ranges of ids, ahead of the Python that checks them, in the order it needs
them: PostgreSQL's work spreads over several backends and overlaps the hashing, and every
reader sees exactly what the verifier's own transaction sees.
"""

from __future__ import annotations

import gc
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
import psycopg
from psycopg import sql

from db.platform.pool import connection, get_pool
from db.platform.tenancy import get_tenant
from domain.evidence.canonical import GENESIS, canonical_value, checkpoint_text, personal_digest
from domain.evidence.verification import EDITED, ERASED, Break, ChainReport, ChainVerifier
from tocsin.core.evidence_signing import signature_holds

__all__ = [
    "AHEAD",
    "FETCH_ROWS",
    "READERS",
    "SOURCES",
    "SnapshotReaders",
    "Source",
    "rendered_rows",
    "source_rows",
    "verify_snapshot",
    "verify_tenant",
]

FETCH_ROWS = 50_000  # chained records (or rows of a table) per query
READERS = 3  # connections reading the snapshot ahead of the verifier (its own one aside)

AHEAD = READERS + 1  # queries asked for before their rows are needed (bounds the memory held)
_decode = msgspec.json.Decoder()  # the payloads' JSON, decoded in C


@dataclass(frozen=True)
class Source:
    """A chained table as it stands: ``query`` returns the row's ref first, then its fields
    named as its facts name them (``personal``: the fields recorded as salted digests, each
    followed by its salt)."""

    table: str
    query: str
    personal: tuple[str, ...] = ()
    key: str = "id"  # the whole-number column the query's rows are read in ranges of
    ref: str = "id::text"  # the row's ref as an expression of the query (its first column)

    def partitioned(self) -> str:
        """The query restricted to the rows of one part of a split verification (parameters:
        the number of parts, the part), as db/evidence/verify_parts.py splits the chain."""
        joiner = " AND " if " WHERE " in self.query else " WHERE "
        return f"{self.query}{joiner}abs(hashtext({self.ref})) %% %s = %s"

    def ranged(self) -> str:
        """The query restricted to a range of ``key`` (parameters: from, to, inclusive)."""
        joiner = " AND " if " WHERE " in self.query else " WHERE "
        return f"{self.query}{joiner}{self.key} BETWEEN %s AND %s"


# Instants and dates rendered by PostgreSQL in the canonical form (domain/evidence/canonical.py),
# by the backends reading for the verifier while it checks what they read before.
_T = """to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS {}"""
_D = "to_char({}, 'YYYY-MM-DD') AS {}"


def _t(column: str) -> str:
    return _T.format(column, column.split(".")[-1])


def _d(column: str) -> str:
    return _D.format(column, column.split(".")[-1])


SOURCES: tuple[Source, ...] = (
    Source("notification_ledger", f"""
        SELECT id::text, {_t("acknowledged_at")}, acknowledged_by, {_t("claimed_at")}, {_t("delivered_at")},
               {_d("due_on")}, event_id, id, {_d("local_date")}, rule, rule_id, rule_version, status,
               status_reason, subject_id, subject_kind, threshold
        FROM notification_ledger"""),
    Source("notification_deliveries", f"""
        SELECT id::text, channel, {_t("created_at")}, digest_id, id, notification_id, status
        FROM notification_deliveries"""),
    Source("delivery_attempts", f"""
        SELECT id::text, attempt_no, claim_token::text AS claim_token, delivery_id, {_t("ended_at")},
               error_class, id, outcome, provider_message_id, {_t("started_at")}
        FROM delivery_attempts"""),
    Source("delivery_events", f"""
        SELECT id::text, delivery_id, event_type, id, {_t("occurred_at")}, provider_message_id
        FROM delivery_events"""),
    Source("rule_versions", f"""
        SELECT v.rule_id || '/' || v.version, {_t("v.changed_at")}, v.changed_by, s.salt,
               encode(sha256(convert_to(v.definition::text, 'UTF8')), 'hex') AS definition_sha256,
               v.enabled, v.rule_id, v.summary, v.version
        FROM rule_versions v LEFT JOIN evidence_salts s ON s.person = lower(v.changed_by)""",
           personal=("changed_by",), key="v.rule_id", ref="v.rule_id || '/' || v.version"),
    # before/after as one salted digest per row (tenant migration 0055): erasure rewrites them.
    Source("audit_log", f"""
        SELECT a.id::text, a.action, a.actor_kind, a.actor_label, sl.salt, a.actor_user_id,
               coalesce(a.before::text, 'null') || ' ' || coalesce(a.after::text, 'null') AS changes,
               sr.salt, a.client_address, sc.salt, a.id, a.object_id, a.object_kind, {_t("a.occurred_at")}
        FROM audit_log a LEFT JOIN evidence_salts sl ON sl.person = lower(a.actor_label)
        LEFT JOIN evidence_salts sr ON sr.person = 'audit_log:' || a.id
        LEFT JOIN evidence_salts sc ON sc.person = lower(a.client_address)""",
           personal=("actor_label", "changes", "client_address"), key="a.id", ref="a.id::text"),
    # tenant migration 0057; an attempt is chained once it is called or ends (none before).
    Source("webhook_deliveries", f"""
        SELECT id::text, {_t("created_at")}, endpoint_id, event_kind, id, ledger_id, status
        FROM webhook_deliveries"""),
    Source("webhook_attempts", f"""
        SELECT id::text, attempt_no, {_t("called_at")}, claim_token::text AS claim_token, delivery_id,
               {_t("ended_at")}, id, latency_ms, outcome, {_t("started_at")}, status_code
        FROM webhook_attempts WHERE (called_at IS NOT NULL OR ended_at IS NOT NULL)"""),
    # tenant migration 0058: texts and chat messages as webhooks (no phone number, URL or text).
    Source("sms_deliveries", f"""
        SELECT id::text, {_t("created_at")}, id, notification_id, status
        FROM sms_deliveries"""),
    Source("sms_attempts", f"""
        SELECT id::text, attempt_no, {_t("called_at")}, claim_token::text AS claim_token, cost::text AS cost,
               delivery_id, {_t("ended_at")}, id, outcome, provider_message_id, segments, {_t("started_at")}
        FROM sms_attempts WHERE (called_at IS NOT NULL OR ended_at IS NOT NULL)"""),
    Source("chat_deliveries", f"""
        SELECT id::text, channel, {_t("created_at")}, critical, id, ledger_id, recipient_user_id, status
        FROM chat_deliveries"""),
    Source("chat_attempts", f"""
        SELECT id::text, attempt_no, {_t("called_at")}, claim_token::text AS claim_token, delivery_id,
               {_t("ended_at")}, id, latency_ms, outcome, {_t("started_at")}, status_code
        FROM chat_attempts WHERE (called_at IS NOT NULL OR ended_at IS NOT NULL)"""),
)


@contextmanager
def _snapshot(slug: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    tenant = get_tenant(slug)
    with connection() as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        conn.execute("SELECT set_config('search_path', %s, true)", [f"{tenant.schema}, public"])
        yield conn


Conn = psycopg.Connection[tuple[object, ...]]


_Batch = tuple[list[str], list[tuple[Any, ...]]]  # a query's column names and rows


class SnapshotReaders:
    """Connections of the verification's own, each in a REPEATABLE READ, READ ONLY transaction
    that imports the verifier's exported snapshot, running queries in threads (PostgreSQL
    works, and the driver waits, without the GIL): ``fetch`` returns a future of all rows."""

    def __init__(self, conninfo: str, snapshot: str, search_path: str, count: int = READERS) -> None:
        self._conninfo, self._snapshot, self._search_path = conninfo, snapshot, search_path
        self._local = threading.local()
        self._opened: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(count, thread_name_prefix="evidence-verify")

    def _conn(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None:
            # No prepared statements: the connection may go through PgBouncer.
            conn = psycopg.connect(self._conninfo, autocommit=True, prepare_threshold=None,
                                   application_name="tocsin-evidence-verify")
            with self._lock:
                self._opened.append(conn)
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(self._snapshot)))
            conn.execute("SELECT set_config('search_path', %s, true)", [self._search_path])
            self._local.conn = conn
        return conn

    def _run(self, query: str, params: Sequence[object]) -> _Batch:
        with self._conn().cursor() as cur:
            cur.execute(query, params)
            names = [c.name for c in cur.description or []]
            return names, cur.fetchall()

    def fetch(self, query: str, params: Sequence[object] = ()) -> Future[_Batch]:
        return self._threads.submit(self._run, query, params)

    def close(self) -> None:
        self._threads.shutdown(wait=True, cancel_futures=True)
        for conn in self._opened:
            conn.close()  # a read-only transaction: nothing to keep


def _ahead(readers: SnapshotReaders, queries: Iterable[tuple[str, Sequence[object]]]) -> Iterator[_Batch]:
    """The queries' results in order, AHEAD of them asked for before the first is needed."""
    waiting: deque[Future[_Batch]] = deque()
    for query, params in queries:
        waiting.append(readers.fetch(query, params))
        if len(waiting) > AHEAD:
            yield waiting.popleft().result()
    while waiting:
        yield waiting.popleft().result()


def _ranges(low: int, high: int) -> Iterator[tuple[int, int]]:
    for start in range(low, high + 1, FETCH_ROWS):
        yield start, min(start + FETCH_ROWS - 1, high)


_CHAIN = ("SELECT seq, kind, ref, payload, prev_hash, hash FROM evidence_chain "
          "WHERE seq BETWEEN %s AND %s ORDER BY seq")


def _queries(conn: Conn) -> Iterator[tuple[str, Sequence[object], Source | None]]:
    """Every query of a verification, in the order the verifier needs their rows: the chain in
    ranges of sequence numbers, then each table in ranges of its key."""
    row = conn.execute("SELECT coalesce(min(seq), 1), coalesce(max(seq), 0) FROM evidence_chain").fetchone()
    assert row is not None
    for low, high in _ranges(int(str(row[0])), int(str(row[1]))):
        yield _CHAIN, (low, high), None
    for source in SOURCES:
        bounds = conn.execute(
            f"SELECT min({source.key}), max({source.key}) {_from_clause(source.query)}").fetchone()
        if bounds is None or bounds[0] is None:
            continue
        for low, high in _ranges(int(str(bounds[0])), int(str(bounds[1]))):
            yield source.ranged(), (low, high), source


def _from_clause(query: str) -> str:
    return query[query.index("FROM "):]


def verify_snapshot(conn: psycopg.Connection[tuple[object, ...]], slug: str,
                    on_progress: Callable[[int], None] | None = None,
                    readers: SnapshotReaders | None = None) -> ChainReport:
    """Verify tenant ``slug``, whose schema ``conn``'s transaction is scoped to; the chain and
    the tables are read by ``readers`` (joined to ``conn``'s snapshot) when given, else by
    ``conn`` itself, one query after the other."""
    verifier = ChainVerifier(_decode.decode)
    record = verifier.record
    queries = list(_queries(conn))
    chain_queries = sum(1 for _q, _p, source in queries if source is None)
    asked = [(q, p) for q, p, _source in queries]
    batches = _ahead(readers, asked) if readers is not None else (_serially(conn, q, p) for q, p in asked)
    n = 0
    for _ in range(chain_queries):
        _names, rows = next(batches)
        for seq, kind, ref, payload, prev_hash, hash_ in rows:
            record(seq, kind, ref, payload, prev_hash, hash_)
        n += len(rows)
        if on_progress is not None:
            on_progress(n)
    for kind, ref, payload in conn.execute(
            "SELECT p.kind, f.ref, f.payload FROM evidence_pending p, "
            "evidence_facts(p.kind, p.ref, p.payload, p.ids) f ORDER BY p.id"):
        verifier.pending(str(kind), str(ref), str(payload))
    for (_query, _params, source), (names, rows) in zip(queries[chain_queries:], batches, strict=True):
        assert source is not None
        row_of, table = verifier.row, source.table
        for ref, values in rendered_rows(source, names, rows):
            row_of(table, ref, values)
    head = conn.execute("SELECT seq, hash FROM evidence_head").fetchone()
    head_seq, head_hash = (0, "") if head is None else (int(str(head[0])), str(head[1]))
    report = verifier.finish(head_seq, head_hash, [s.table for s in SOURCES])
    report.breaks.extend(_checkpoint_breaks(conn, slug, report.head_seq))
    return report


def _serially(conn: Conn, query: str, params: Sequence[object]) -> _Batch:
    with conn.cursor() as cur:
        cur.execute(query, params)
        return [c.name for c in cur.description or []], cur.fetchall()


def _checkpoint_breaks(conn: Conn, slug: str, chain_end: int) -> list[Break]:
    """Each signed checkpoint must verify against its key and name a record of the chain
    with the hash it signed (the chain's own links are verified before)."""
    breaks = []
    rows = conn.execute(
        "SELECT c.id, c.seq, c.head_hash, c.signed_at, c.key_id, c.signature, k.public_key, "
        "CASE WHEN c.seq = 0 THEN %s ELSE ch.hash END "
        "FROM evidence_checkpoints c LEFT JOIN control.evidence_keys k ON k.key_id = c.key_id "
        "LEFT JOIN evidence_chain ch ON ch.seq = c.seq ORDER BY c.id", [GENESIS]).fetchall()
    for id_, seq, head_hash, signed_at, key_id, signature, public_key, chain_hash_ in rows:
        assert isinstance(signed_at, datetime) and isinstance(seq, int)
        text = checkpoint_text(slug, seq, str(head_hash), signed_at, str(key_id))
        if public_key is None:
            what = f"its key {key_id} is unknown (control.evidence_keys)"
        elif not signature_holds(str(public_key), text, str(signature)):
            what = "its Ed25519 signature does not verify (the checkpoint was edited)"
        elif seq > chain_end:
            what = f"it signed sequence {seq}, beyond the chain's end at {chain_end} (records were removed)"
        elif chain_hash_ != head_hash:
            what = f"it signed hash {head_hash} at sequence {seq}, the chain has {chain_hash_}"
        else:
            continue
        breaks.append(Break(seq or None, "evidence_checkpoints", str(id_), what))
    return breaks


def source_rows(conn: Conn, source: Source) -> Iterator[tuple[str, dict[str, object]]]:
    """Each row of a chained table as (ref, its fields rendered as the chain renders them)."""
    with conn.cursor() as cur:
        cur.execute(source.query)
        names = [c.name for c in cur.description or []]
        yield from rendered_rows(source, names, cur)


def rendered_rows(source: Source, names: list[str], rows: Iterable[tuple[Any, ...]]
                  ) -> Iterator[tuple[str, dict[str, object]]]:
    """Each row as (ref, its fields as the chain renders them; personal fields as their
    salted digest, or ERASED without a salt)."""
    names = names[1:]
    personal = {names.index(p) for p in source.personal}
    if not personal:
        for raw in rows:
            yield str(raw[0]), dict(zip(names, raw[1:], strict=True))
        return
    for raw in rows:
        fields: dict[str, object] = {}
        skip = False
        for i, name in enumerate(names):
            if skip:
                skip = False
                continue
            value = raw[i + 1]
            if i in personal:
                salt = raw[i + 2]
                fields[name] = (personal_digest(salt, str(value)) if isinstance(salt, bytes)
                                and value is not None else ERASED)
                skip = True  # the salt itself is not a field
            else:
                fields[name] = canonical_value(value)
        yield str(raw[0]), fields


def verify_tenant(slug: str, on_progress: Callable[[int], None] | None = None,
                  parts: int = 0) -> ChainReport:
    """Verify one tenant's chain and rows as of one instant, in this process (its readers
    ahead of it), or split in ``parts`` processes (db/evidence/verify_parts.py: for a machine
    with idle cores; on a busy one, or with two CPUs, the parts' duplicated reading cost more
    than they saved: docs/benchmarks/evidence.md)."""
    with _snapshot(slug) as conn, _no_cycle_collection():
        row = conn.execute("SELECT pg_export_snapshot(), current_setting('search_path')").fetchone()
        assert row is not None
        conninfo = get_pool().conninfo
        assert isinstance(conninfo, str)  # the pool is opened with the database URL
        if parts > 1:
            return _verify_in_parts(conn, slug, conninfo, str(row[0]), str(row[1]), parts, on_progress)
        readers = SnapshotReaders(conninfo, str(row[0]), str(row[1]))
        try:
            return verify_snapshot(conn, slug, on_progress, readers)
        finally:
            readers.close()


def _verify_in_parts(conn: Conn, slug: str, conninfo: str, snapshot: str, search_path: str, parts: int,
                     on_progress: Callable[[int], None] | None) -> ChainReport:
    from db.evidence.verify_parts import Snapshot, check_facts, check_links, processes

    where = Snapshot(conninfo, snapshot, search_path)
    bounds = conn.execute(
        "SELECT coalesce(min(seq), 1), coalesce(max(seq), 0) FROM evidence_chain").fetchone()
    assert bounds is not None
    low, high = int(str(bounds[0])), int(str(bounds[1]))
    step = max(1, -(-(high - low + 1) // parts))
    pool = processes(parts)
    links = [pool.submit(check_links, where, start, min(start + step - 1, high))
             for start in range(low, high + 1, step)]
    facts = [pool.submit(check_facts, where, part, parts) for part in range(parts)]
    report = ChainReport()
    broken: set[int] = set()
    for future in links:
        done = future.result()
        report.records += done.records
        report.breaks.extend(done.breaks)
        broken |= done.broken
        if done.last is not None:
            report.head_seq, report.head_hash = done.last
        if on_progress is not None:
            on_progress(report.records)
    for pending_part in facts:
        part = pending_part.result()
        report.rows += part.rows
        report.pending += part.pending
        report.breaks.extend(b for b in part.breaks if not (b.what == EDITED and b.seq in broken))
    head = conn.execute("SELECT seq, hash FROM evidence_head").fetchone()
    head_seq, head_hash = (0, "") if head is None else (int(str(head[0])), str(head[1]))
    verifier = ChainVerifier()
    verifier.report = report
    verifier.check_head(head_seq, head_hash)
    report.breaks.extend(_checkpoint_breaks(conn, slug, report.head_seq))
    return report


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Verification holds a view of every chained row, and makes no reference cycles: the
    cycle collector's passes over that growing heap made a large chain's verification
    quadratic (300,000 records ran at a third of the rate of 60,000)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
