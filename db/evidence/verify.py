"""Recomputing a tenant's evidence chain and comparing each chained row with the chain's view
of it (domain/evidence/verification.py), in one consistent snapshot.

Read-only: ``verify_tenant`` opens a REPEATABLE READ, READ ONLY transaction of its own, so
the chain, its pending facts and the rows it names are read as of one instant while sealers
and writers go on.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

import msgspec
import psycopg

from db.platform.pool import connection
from db.platform.tenancy import get_tenant
from domain.evidence.canonical import GENESIS, canonical_value, checkpoint_text, personal_digest
from domain.evidence.verification import ERASED, Break, ChainReport, ChainVerifier
from tocsin.core.evidence_signing import signature_holds

__all__ = ["FETCH_ROWS", "SOURCES", "Source", "source_rows", "verify_snapshot", "verify_tenant"]

FETCH_ROWS = 50_000  # chained records per query
_decode = msgspec.json.Decoder()  # the payloads' JSON, decoded in C


@dataclass(frozen=True)
class Source:
    """A chained table as it stands: ``query`` returns the row's ref first, then its fields
    named as its facts name them (``personal``: the fields recorded as salted digests, each
    followed by its salt)."""

    table: str
    query: str
    personal: tuple[str, ...] = ()


# Instants and dates rendered by PostgreSQL in the canonical form (domain/evidence/canonical.py):
# formatting them in Python was most of the verification's time.
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
           personal=("changed_by",)),
    # before/after as one salted digest per row (tenant migration 0055): erasure rewrites them.
    Source("audit_log", f"""
        SELECT a.id::text, a.action, a.actor_kind, a.actor_label, sl.salt, a.actor_user_id,
               coalesce(a.before::text, 'null') || ' ' || coalesce(a.after::text, 'null') AS changes,
               sr.salt, a.client_address, sc.salt, a.id, a.object_id, a.object_kind, {_t("a.occurred_at")}
        FROM audit_log a LEFT JOIN evidence_salts sl ON sl.person = lower(a.actor_label)
        LEFT JOIN evidence_salts sr ON sr.person = 'audit_log:' || a.id
        LEFT JOIN evidence_salts sc ON sc.person = lower(a.client_address)""",
           personal=("actor_label", "changes", "client_address")),
    # tenant migration 0057; an attempt is chained once it is called or ends (none before).
    Source("webhook_deliveries", f"""
        SELECT id::text, {_t("created_at")}, endpoint_id, event_kind, id, ledger_id, status
        FROM webhook_deliveries"""),
    Source("webhook_attempts", f"""
        SELECT id::text, attempt_no, {_t("called_at")}, claim_token::text AS claim_token, delivery_id,
               {_t("ended_at")}, id, latency_ms, outcome, {_t("started_at")}, status_code
        FROM webhook_attempts WHERE called_at IS NOT NULL OR ended_at IS NOT NULL"""),
)


@contextmanager
def _snapshot(slug: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    tenant = get_tenant(slug)
    with connection() as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        conn.execute("SELECT set_config('search_path', %s, true)", [f"{tenant.schema}, public"])
        yield conn


Conn = psycopg.Connection[tuple[object, ...]]


def _chain(conn: Conn) -> Iterator[tuple[object, ...]]:
    """The chain in sequence order, FETCH_ROWS records per query (by key, not by offset). A
    client-side fetch per batch: a server-side cursor's round trips took most of the time."""
    last = 0
    while True:
        rows = conn.execute(
            "SELECT seq, kind, ref, payload, prev_hash, hash FROM evidence_chain WHERE seq > %s "
            "ORDER BY seq LIMIT %s", [last, FETCH_ROWS]).fetchall()
        yield from rows
        if len(rows) < FETCH_ROWS:
            return
        last = int(str(rows[-1][0]))


def verify_snapshot(conn: psycopg.Connection[tuple[object, ...]], slug: str,
                    on_progress: Callable[[int], None] | None = None) -> ChainReport:
    """Verify tenant ``slug``, whose schema ``conn``'s transaction is scoped to."""
    verifier = ChainVerifier(_decode.decode)
    record = verifier.record
    for n, (seq, kind, ref, payload, prev_hash, hash_) in enumerate(_chain(conn), start=1):
        record(seq, kind, ref, payload, prev_hash, hash_)  # type: ignore[arg-type]  # int, str...
        if on_progress is not None and n % 100_000 == 0:
            on_progress(n)
    for kind, ref, payload in conn.execute(
            "SELECT p.kind, f.ref, f.payload FROM evidence_pending p, "
            "evidence_facts(p.kind, p.ref, p.payload, p.ids) f ORDER BY p.id"):
        verifier.pending(str(kind), str(ref), str(payload))
    for source in SOURCES:
        _compare(conn, verifier, source)
    head = conn.execute("SELECT seq, hash FROM evidence_head").fetchone()
    head_seq, head_hash = (0, "") if head is None else (int(str(head[0])), str(head[1]))
    report = verifier.finish(head_seq, head_hash, [s.table for s in SOURCES])
    report.breaks.extend(_checkpoint_breaks(conn, slug, report.head_seq))
    return report


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
        assert cur.description is not None
        names = [c.name for c in cur.description][1:]
        personal = {names.index(p) for p in source.personal}
        if not personal:
            for raw in cur:
                yield str(raw[0]), dict(zip(names, raw[1:], strict=True))
            return
        for raw in cur:
            values: dict[str, object] = {}
            skip = False
            for i, name in enumerate(names):
                if skip:
                    skip = False
                    continue
                value = raw[i + 1]
                if i in personal:
                    salt = raw[i + 2]
                    values[name] = (personal_digest(salt, str(value)) if isinstance(salt, bytes)
                                    and value is not None else ERASED)
                    skip = True  # the salt itself is not a field
                else:
                    values[name] = canonical_value(value)
            yield str(raw[0]), values


def _compare(conn: Conn, verifier: ChainVerifier, source: Source) -> None:
    row_of, table = verifier.row, source.table
    for ref, values in source_rows(conn, source):
        row_of(table, ref, values)


def verify_tenant(slug: str, on_progress: Callable[[int], None] | None = None) -> ChainReport:
    """Verify one tenant's chain and rows as of one instant."""
    with _snapshot(slug) as conn, _no_cycle_collection():
        return verify_snapshot(conn, slug, on_progress)


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
