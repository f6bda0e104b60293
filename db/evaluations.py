"""Evaluation of a claimed batch of events: rule claims in the ledger, the trace, done.

One tenant transaction per batch (actors/relay.py ``evaluate_batch``):
1. lock the batch's events still 'processing' (SKIP LOCKED: a duplicate message running at
   the same moment takes none of them; one that runs later finds them evaluated);
2. per event, the rules engine's four phases (db/rules.py ``candidate_indexes_of`` is phase 1
   in SQL, for every (product, event type, trigger type) of the batch in one statement;
   domain/evaluation.py phases 2 to 4), the events of the batch in step: the stored facts all of them want for
   phase 3, then for phase 4, are loaded in one call each (targeted loading, db/facts.py:
   one query per family for the whole batch, in one round trip);
3. one ledger row per (rule, event) that fired, under the ledger's unique key (rule
   'rule:<id>', subject, threshold 'event:<id>', the day it occurred), naming the rule's
   version; ON CONFLICT DO NOTHING makes a second evaluation of the same event claim nothing;
4. the events marked evaluated with the trace an admin reads later (which rule stopped in
   which phase, each condition with the value seen).
After commit the new claims go to their product's preparation queue (TenantTx.claims_to_prepare).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from db.facts import BatchLoader, load_facts_of_subjects
from db.rules import CandidateKey, candidate_indexes_of
from db.tenancy import TenantTx
from domain.conditions import WantedFacts
from domain.evaluation import Evaluated, Evaluation, EventFacts, evaluation


@dataclass
class EvaluationReport:
    evaluated: int = 0
    claims: int = 0
    lags: list[float] = field(default_factory=list)  # seconds from each event's commit


_BATCH = """
SELECT e.id, e.product, e.subject_id, e.event_type, e.trigger_type, e.changes, e.metadata,
       ((e.occurred_at AT TIME ZONE 'UTC')::date)::text,
       extract(epoch FROM clock_timestamp() - e.recorded_at)::float8,
       s.kind, s.external_id, s.title, s.status,
       coalesce((SELECT array_agg(lower(u.email) ORDER BY lower(u.email))
                 FROM subject_assignees a JOIN users u ON u.id = a.user_id
                 WHERE a.subject_id = s.id), '{}')
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

# The traces as a text array sent in binary (each trace its own element, no escaping),
# cast to json in the statement; the ids as one comma-separated text. A single JSON
# document of the batch, unpacked with json_to_recordset, cost four times as much in
# PostgreSQL (the whole document parsed, then each trace copied out of it).
_DONE = """
UPDATE events e SET status = 'evaluated', evaluated_at = clock_timestamp(), lease_until = NULL,
       last_error = NULL, trace = t.trace::json
FROM unnest(string_to_array(%(ids)s::text, ',')::bigint[], %(traces)b::text[]) AS t(id, trace)
WHERE e.id = t.id
"""


# JSON without spaces, encoded in C (json.dumps took a tenth of an evaluation).
_encode = msgspec.json.Encoder().encode
_NONE: dict[str, object] = {}  # no stored facts (never written to)
# The encoded phase-2 part of traces, by the phase-2 answer it encodes (events with the same
# answer share it: domain/evaluation.py TriggerIndex); the answer is held, so its id is not
# reused while it is here. Shared by the worker's threads (single dict operations).
_UNMATCHED_KEPT = 4096
_unmatched_json: dict[int, tuple[object, bytes]] = {}


def _trace_json(evaluated: Evaluated) -> str:
    """``_encode(evaluated.trace())``, with the phase-2 part encoded once per answer."""
    head = _encode(evaluated.outcome_trace())
    if not evaluated.unmatched:
        return head.decode()
    kept = _unmatched_json.get(id(evaluated.unmatched))
    if kept is None or kept[0] is not evaluated.unmatched:
        if len(_unmatched_json) >= _UNMATCHED_KEPT:
            _unmatched_json.clear()
        kept = _unmatched_json[id(evaluated.unmatched)] = (
            evaluated.unmatched, _encode(evaluated.unmatched_trace()))
    tail = kept[1]
    if head == b"[]":
        return tail.decode()
    return (head[:-1] + b"," + tail[1:]).decode()


def evaluate_claimed(tx: TenantTx, event_ids: list[int],
                     load: BatchLoader = load_facts_of_subjects) -> EvaluationReport:
    report = EvaluationReport()
    rows = tx.conn.execute(_BATCH, [event_ids]).fetchall()
    if not rows:
        return report
    # Phase 1 once per (product, event type, trigger type) of the batch, in one statement.
    keys: list[CandidateKey] = [(r[1], r[3], r[4]) for r in rows]  # type: ignore[misc]
    rules_for = candidate_indexes_of(tx, keys)
    runs: dict[int, Evaluation] = {}  # by event: its phases 2-4, driven below
    subject_of: dict[int, int] = {}
    wants: dict[int, WantedFacts] = {}
    outcomes: dict[int, Evaluated] = {}
    product_of: dict[int, str] = {}
    due_on: dict[int, str] = {}
    lags = report.lags
    for row, key in zip(rows, keys, strict=True):
        (event_id, _, subject_id, _, _, changes, metadata, due, lag, kind, external_id,
         title, status, assignees) = row
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
        run = runs[eid] = evaluation(rules_for[key], event)
        wants[eid] = next(run)
        lags.append(lag)  # type: ignore[arg-type]
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
    # and indexes) while this process encodes the traces; one round trip for both.
    with tx.conn.pipeline():
        claimed = tx.conn.execute(_CLAIM, {
            "rule_ids": ",".join(rule_ids), "versions": ",".join(versions),
            "subject_ids": ",".join(subject_ids), "event_ids": ",".join(claim_events),
            "due": ",".join(dues)}) if rule_ids else None
        traces = [_trace_json(evaluated) for evaluated in outcomes.values()]
        tx.conn.execute(_DONE, {"ids": ",".join(map(str, outcomes)), "traces": traces})
    if claimed is not None:
        for ledger_id, event_id in claimed.fetchall():
            tx.claims_to_prepare.append((product_of[event_id], ledger_id))  # type: ignore[index, arg-type]
            report.claims += 1
    report.evaluated = len(outcomes)
    return report
