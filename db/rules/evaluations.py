"""Evaluation of a claimed batch of events: rule claims in the ledger, the trace, done.

One tenant transaction per batch (actors/relay.py ``evaluate_batch``):
1. lock the batch's events still 'processing' (SKIP LOCKED: a duplicate message running at
   the same moment takes none of them; one that runs later finds them evaluated);
2. per event, the rules engine's four phases (db/rules/definitions.py ``candidate_indexes_of`` is phase 1
   in SQL, for every (product, event type, trigger type) of the batch in one statement;
   domain/rules/evaluation.py phases 2 to 4), the events of the batch in step: the stored facts
   all of them want for phase 3, then for phase 4, are loaded in one call each (targeted
   loading, db/events/facts.py: one query per family for the whole batch, in one round trip);
3. one ledger row per (rule, event) that fired, under the ledger's unique key (rule
   'rule:<id>', subject, threshold 'event:<id>', the day it occurred), naming the rule's
   version; ON CONFLICT DO NOTHING makes a second evaluation of the same event claim nothing;
4. the events marked evaluated with the trace an admin reads later (which rule stopped in
   which phase, each condition with the value seen); the phase-2 part of a trace, shared by
   every event with the same phase-2 answer, is stored once in trace_parts and named by its
   digest (``stored_traces`` splices it back in; the ledger page shows a claim's part).
One event whose evaluation raises (a value a host wrote straight into the tables that no
rule can read) fails alone, in the same transaction: it is marked failed with the error and
claims nothing, and the rest of the batch is evaluated and committed. Its batch is never
handed back, so its tenant's breaker never counts it: the other events are not held up.
After commit the new claims go to their product's preparation queue (a PrepareClaims effect).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from db.events.facts import BatchLoader, load_facts_of_subjects
from db.platform.effects import PrepareClaims
from db.platform.tenancy import TenantTx
from db.rules.definitions import CandidateKey, candidate_indexes_of
from domain.events.states import EVENT, EventStatus
from domain.rules.conditions import WantedFacts
from domain.rules.evaluation import Evaluated, Evaluation, EventFacts, evaluation

__all__ = ["MAX_EVENT_ERROR_CHARS", "EvaluationReport", "evaluate_claimed", "expand_trace", "stored_traces"]


@dataclass
class EvaluationReport:
    evaluated: int = 0
    claims: int = 0
    lags: list[float] = field(default_factory=list)  # seconds from each event's commit
    failed: dict[int, str] = field(default_factory=dict)  # event id -> why it could not be evaluated


MAX_EVENT_ERROR_CHARS = 500  # characters of an evaluation's error kept on the event

# Events whose own evaluation raised: failed at once with the error (another attempt would
# raise again), beside the batch's evaluated ones.
_FAILED = f"""
UPDATE events e SET status = 'failed', lease_until = NULL, last_error = t.error
FROM unnest(%s::bigint[], %s::text[]) AS t(id, error)
WHERE e.id = t.id AND {EVENT.where(to=EventStatus.FAILED, from_=[EventStatus.PROCESSING], alias="e")}
"""


def _error_text(error: BaseException) -> str:
    return f"evaluation failed: {type(error).__name__}: {error}"[:MAX_EVENT_ERROR_CHARS]


_BATCH = """
SELECT e.id, e.product, e.subject_id, e.event_type, e.trigger_type, e.changes, e.metadata,
       ((e.occurred_at AT TIME ZONE 'UTC')::date)::text,
       extract(epoch FROM clock_timestamp() - e.recorded_at)::float8,
       s.kind, s.external_id, s.title, s.status,
       coalesce((SELECT array_agg(lower(u.email) ORDER BY lower(u.email))
                 FROM subject_assignees a JOIN users u ON u.id = a.user_id
                 WHERE a.subject_id = s.id), '{}'),
       (SELECT revision::text FROM rules_revision)  -- phase 1's answers are kept by it
FROM events e JOIN subjects s ON s.id = e.subject_id
WHERE e.id = ANY(%s) AND e.status = 'processing'
ORDER BY e.id
FOR UPDATE OF e SKIP LOCKED
"""

# The claims' columns as comma-separated texts split by PostgreSQL (psycopg dumps a list
# element by element in Python; joining numbers and dates in one string is far cheaper).
_CLAIM = """
INSERT INTO notification_ledger
    (rule, subject_kind, subject_id, threshold, due_on, local_date, rule_id, rule_version, event_id)
SELECT 'rule:' || r.rule_id, 'subject', r.subject_id, 'event:' || r.event_id,
       r.due_on, (now() AT TIME ZONE 'UTC')::date, r.rule_id, r.rule_version, r.event_id
FROM unnest(string_to_array(%(rule_ids)s::text, ',')::bigint[],
            string_to_array(%(versions)s::text, ',')::int[],
            string_to_array(%(subject_ids)s::text, ',')::bigint[],
            string_to_array(%(event_ids)s::text, ',')::bigint[],
            string_to_array(%(due)s::text, ',')::date[])
     AS r(rule_id, rule_version, subject_id, event_id, due_on)
ORDER BY r.event_id, r.rule_id
ON CONFLICT ON CONSTRAINT notification_once DO NOTHING
RETURNING id, event_id
"""

# The traces as one text, split by PostgreSQL at the ASCII record separator (U+001E), each
# cast to json in the statement; the ids as one comma-separated text. Encoded JSON never
# holds that character raw (a control character in a JSON string is always escaped), and
# one text costs this process one dump instead of one per trace (a text[] parameter). A
# single JSON document of the batch, unpacked with json_to_recordset, cost four times as
# much in PostgreSQL (the whole document parsed, then each trace copied out of it).
_TRACE_SEPARATOR = b"\x1e"
_DONE = f"""
UPDATE events e SET status = 'evaluated', evaluated_at = clock_timestamp(), lease_until = NULL,
       last_error = NULL, trace = t.trace::json
FROM unnest(string_to_array(%(ids)s::text, ','),
            string_to_array(%(traces)s::text, chr(30))) AS t(id, trace)
WHERE e.id = t.id::bigint AND {EVENT.where(to=EventStatus.EVALUATED, alias="e")}
"""


# Each distinct phase-2 part of the batch's traces, stored once (digests in a fixed order,
# so two transactions storing the same parts wait for each other instead of deadlocking;
# a part another transaction stored already is left as it is: a digest names one text).
_PARTS = """
INSERT INTO trace_parts (digest, part)
SELECT t.digest, t.part::json
FROM unnest(%(digests)b::bytea[], %(parts)b::text[]) AS t(digest, part)
ORDER BY t.digest
ON CONFLICT (digest) DO NOTHING
"""

_PARTS_OF = "SELECT digest, part FROM trace_parts WHERE digest = ANY(%s)"


# JSON without spaces, encoded in C (json.dumps took a tenth of an evaluation).
_encode = msgspec.json.Encoder().encode
_NONE: dict[str, object] = {}  # no stored facts (never written to)


@dataclass(frozen=True, slots=True)
class _Part:
    """A phase-2 part as stored: its JSON text, the digest naming it, and the entry that
    stands for it in an event's trace (already encoded, without its brackets)."""

    answer: object  # the phase-2 answer encoded (held, so its id is not reused while kept)
    text: bytes
    digest: bytes
    entry: bytes


def _part_entry(digest: bytes) -> dict[str, object]:
    return {"phase": 2, "fired": False, "trace_part": digest.hex()}


# The parts, by the phase-2 answer they encode (events with the same answer share it:
# domain/rules/evaluation.py TriggerIndex). Shared by the worker's threads (single dict operations).
_PARTS_KEPT = 4096
_parts_kept: dict[int, _Part] = {}


def _part_of(evaluated: Evaluated) -> _Part:
    part = _parts_kept.get(id(evaluated.unmatched))
    if part is None or part.answer is not evaluated.unmatched:
        if len(_parts_kept) >= _PARTS_KEPT:
            _parts_kept.clear()
        text = _encode(evaluated.unmatched_trace())
        digest = hashlib.blake2b(text, digest_size=16).digest()
        part = _parts_kept[id(evaluated.unmatched)] = _Part(
            evaluated.unmatched, text, digest, _encode(_part_entry(digest)))
    return part


# The digests of the parts this process has seen committed, by tenant (id and schema: a
# tenant made again under the same schema name is another tenant). Only a hint: a commit
# that did not wait for the flush (tenant_tx redoable) can be lost with a crash of
# PostgreSQL while this process lives on, so each batch checks, in the same round trip,
# that the parts it only names are there, and stores them again when they are not.
_KNOWN_KEPT = 8192
_known_parts: dict[tuple[int, str], set[bytes]] = {}

# The digests as one text of '\\x<hex>' values (bytea's input form), split by PostgreSQL.
_COUNT_PARTS = "SELECT count(*) FROM trace_parts WHERE digest = ANY(string_to_array(%s::text, ',')::bytea[])"


@dataclass
class _PartsStored:
    """What a batch sent for its parts: the ones stored now, and the count of those it only
    named, still to be compared with what PostgreSQL holds (``confirm``)."""

    tx: TenantTx
    parts: dict[bytes, bytes]
    named: list[bytes]
    count: Any = None  # the cursor of _COUNT_PARTS, read once the pipeline is done

    def confirm(self) -> None:
        key = (self.tx.tenant.id, self.tx.tenant.schema)
        if self.count is not None:
            row = self.count.fetchone()
            if row is None or row[0] != len(self.named):
                # Lost with an unflushed commit: forget them all and store them again.
                _known_parts.pop(key, None)
                _insert_parts(self.tx, {d: self.parts[d] for d in self.named})
        stored = list(self.parts)

        def note() -> None:
            held = _known_parts.setdefault(key, set())
            if len(held) >= _KNOWN_KEPT:
                held.clear()
            held.update(stored)
        self.tx.after_commit(note)


def _insert_parts(tx: TenantTx, parts: dict[bytes, bytes]) -> None:
    tx.conn.execute(_PARTS, {"digests": list(parts), "parts": [t.decode() for t in parts.values()]})


def _store_parts(tx: TenantTx, parts: dict[bytes, bytes]) -> _PartsStored:
    """Sends the parts this process has not seen committed, and the check of those it has
    (in the transaction's pipeline); ``confirm`` once the pipeline is done."""
    known = _known_parts.get((tx.tenant.id, tx.tenant.schema), set())
    named = [d for d in parts if d in known]
    new = {d: t for d, t in parts.items() if d not in known}
    if new:
        _insert_parts(tx, new)
    stored = _PartsStored(tx, parts, named)
    if named:
        stored.count = tx.conn.execute(_COUNT_PARTS, [",".join("\\x" + d.hex() for d in named)])
    return stored


def _trace_json(evaluated: Evaluated, parts: dict[bytes, bytes]) -> bytes:
    """The trace stored on the event: ``evaluated.trace()`` with its phase-2 part (if any)
    replaced by the entry naming it, the part added to ``parts`` (digest -> text)."""
    head = _encode(evaluated.outcome_trace())
    if not evaluated.unmatched:
        return head
    part = _part_of(evaluated)
    parts[part.digest] = part.text
    if head == b"[]":
        return b"[" + part.entry + b"]"
    return head[:-1] + b"," + part.entry + b"]"


def expand_trace(trace: list[dict[str, Any]],
                 parts: dict[bytes, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A stored trace with each part it names spliced in, in place of the naming entry."""
    out: list[dict[str, Any]] = []
    for entry in trace:
        name = entry.get("trace_part")
        if name is None:
            out.append(entry)
        else:
            part = parts.get(bytes.fromhex(str(name)))
            if part is None:
                raise LookupError(f"the trace names part {name}, which trace_parts does not hold")
            out.extend(part)
    return out


def _part_names(traces: Iterable[list[dict[str, Any]]]) -> list[bytes]:
    return sorted({bytes.fromhex(str(e["trace_part"])) for t in traces for e in t if "trace_part" in e})


def stored_traces(tx: TenantTx, event_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """The traces of these events as evaluated (the events not evaluated yet have none):
    each rule that reached phase 3 with the values its conditions saw, and the rules phase 2
    dropped, by reason (the parts read from trace_parts and spliced back in)."""
    rows = tx.conn.execute("SELECT id, trace FROM events WHERE id = ANY(%s) AND trace IS NOT NULL",
                           [event_ids]).fetchall()
    traces: dict[int, list[dict[str, Any]]] = {int(str(i)): t for i, t in rows}  # type: ignore[misc]
    names = _part_names(traces.values())
    stored = tx.conn.execute(_PARTS_OF, [names]).fetchall() if names else []
    parts = {bytes(d): p for d, p in stored}  # type: ignore[call-overload]
    return {i: expand_trace(t, parts) for i, t in traces.items()}  # type: ignore[arg-type]


def evaluate_claimed(tx: TenantTx, event_ids: list[int],
                     load: BatchLoader = load_facts_of_subjects) -> EvaluationReport:
    report = EvaluationReport()
    rows = tx.conn.execute(_BATCH, [event_ids]).fetchall()
    if not rows:
        return report
    # Phase 1 once per (product, event type, trigger type) of the batch, in one statement.
    keys: list[CandidateKey] = [(r[1], r[3], r[4]) for r in rows]  # type: ignore[misc]
    rules_for = candidate_indexes_of(tx, keys, str(rows[0][14]))
    runs: dict[int, Evaluation] = {}  # by event: its phases 2-4, driven below
    subject_of: dict[int, int] = {}
    wants: dict[int, WantedFacts] = {}
    outcomes: dict[int, Evaluated] = {}
    product_of: dict[int, str] = {}
    due_on: dict[int, str] = {}
    lags = report.lags
    for row, key in zip(rows, keys, strict=True):
        (event_id, _, subject_id, _, _, changes, metadata, due, lag, kind, external_id,
         title, status, assignees, _) = row
        event = EventFacts(
            event_type=key[1], trigger_type=key[2], subject_kind=kind,  # type: ignore[arg-type]
            metadata=metadata or {},  # type: ignore[arg-type]
            changes=changes or {},  # type: ignore[arg-type]
            subject_facts={"subject.kind": kind, "subject.external_id": external_id,
                           "subject.title": title, "subject.status": status,
                           "subject.assignees": list(assignees or [])},  # type: ignore[call-overload]
        )
        eid: int = event_id  # type: ignore[assignment]
        subject_of[eid] = subject_id  # type: ignore[assignment]
        product_of[eid] = key[0]
        due_on[eid] = due  # type: ignore[assignment]
        lags.append(lag)  # type: ignore[arg-type]
        try:
            run = runs[eid] = evaluation(rules_for[key], event)
            wants[eid] = next(run)
        except Exception as error:  # this event's data, not the batch's: it fails alone
            runs.pop(eid, None)
            report.failed[eid] = _error_text(error)
    # Phases 3 and 4 in step for the whole batch: what every event wants is loaded in one
    # call (one query per family), not one per event.
    while runs:
        by_subject: dict[int, WantedFacts] = {}
        for eid, wanted in wants.items():
            if wanted:
                sid = subject_of[eid]
                had = by_subject.get(sid)
                by_subject[sid] = wanted if had is None else had.union(wanted)
        loaded = load(tx, by_subject) if by_subject else {}
        for eid in list(runs):
            try:
                wants[eid] = runs[eid].send(loaded.get(subject_of[eid], _NONE) if wants[eid] else _NONE)
            except StopIteration as done:
                outcomes[eid] = done.value
                del runs[eid], wants[eid]
            except Exception as error:  # this event's data, not the batch's: it fails alone
                report.failed[eid] = _error_text(error)
                del runs[eid], wants[eid]

    rule_ids: list[str] = []
    versions: list[str] = []
    subject_ids: list[str] = []
    claim_events: list[str] = []
    dues: list[str] = []
    for eid, evaluated in outcomes.items():
        for result in evaluated.outcomes:
            if result.fired:
                rule_ids.append(str(result.rule_id))
                versions.append(str(result.rule_version))
                subject_ids.append(str(subject_of[eid]))
                claim_events.append(str(eid))
                dues.append(due_on[eid])
    # The claims go first, in a pipeline: PostgreSQL inserts them (the ledger's unique key
    # and indexes) while this process encodes the traces; one round trip for all of it.
    # (A trace holds JSON values read back from jsonb: encoding one cannot fail.)
    with tx.conn.pipeline():
        claimed = tx.conn.execute(_CLAIM, {
            "rule_ids": ",".join(rule_ids), "versions": ",".join(versions),
            "subject_ids": ",".join(subject_ids), "event_ids": ",".join(claim_events),
            "due": ",".join(dues)}) if rule_ids else None
        parts: dict[bytes, bytes] = {}
        traces = _TRACE_SEPARATOR.join([_trace_json(evaluated, parts) for evaluated in outcomes.values()])
        stored = _store_parts(tx, parts)
        if outcomes:
            tx.conn.execute(_DONE, {"ids": ",".join(map(str, outcomes)), "traces": traces.decode()})
        if report.failed:
            tx.conn.execute(_FAILED, [list(report.failed), list(report.failed.values())])
    stored.confirm()
    if claimed is not None:
        new_claims = [(product_of[int(str(event_id))], int(str(ledger_id)))
                      for ledger_id, event_id in claimed.fetchall()]
        tx.after_commit(PrepareClaims(new_claims))
        report.claims += len(new_claims)
    report.evaluated = len(outcomes)
    return report
