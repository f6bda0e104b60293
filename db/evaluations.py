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
from typing import Any

import msgspec

from db.facts import BatchLoader, load_facts_of_subjects
from db.rules import candidate_indexes_of
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
       e.occurred_at, extract(epoch FROM clock_timestamp() - e.recorded_at)::float8,
       s.kind, s.external_id, s.title, s.status,
       coalesce((SELECT array_agg(lower(u.email) ORDER BY lower(u.email))
                 FROM subject_assignees a JOIN users u ON u.id = a.user_id
                 WHERE a.subject_id = s.id), '{}')
FROM events e JOIN subjects s ON s.id = e.subject_id
WHERE e.id = ANY(%s) AND e.status = 'processing'
ORDER BY e.id
FOR UPDATE OF e SKIP LOCKED
"""

_CLAIM = """
INSERT INTO notification_ledger
    (rule, subject_kind, subject_id, threshold, due_on, local_date, rule_id, rule_version, event_id)
SELECT 'rule:' || r.rule_id, 'subject', r.subject_id, 'event:' || r.event_id,
       (r.occurred_at AT TIME ZONE 'UTC')::date, (now() AT TIME ZONE 'UTC')::date,
       r.rule_id, r.rule_version, r.event_id
FROM unnest(%(rule_ids)b::bigint[], %(versions)b::int[], %(subject_ids)b::bigint[],
            %(event_ids)b::bigint[], %(occurred)b::timestamptz[])
     AS r(rule_id, rule_version, subject_id, event_id, occurred_at)
ORDER BY r.event_id, r.rule_id
ON CONFLICT ON CONSTRAINT notification_once DO NOTHING
RETURNING id, event_id
"""

# The traces as a text array sent in binary (each trace its own element, no escaping),
# cast to json in the statement. A single JSON document of the batch, unpacked with
# json_to_recordset, cost four times as much in PostgreSQL (the whole document parsed,
# then each trace copied out of it).
_DONE = """
UPDATE events e SET status = 'evaluated', evaluated_at = clock_timestamp(), lease_until = NULL,
       last_error = NULL, trace = t.trace::json
FROM unnest(%(ids)b::bigint[], %(traces)b::text[]) AS t(id, trace)
WHERE e.id = t.id
"""


def _compact_json(value: object) -> bytes:
    """JSON without spaces, encoded in C (json.dumps took a tenth of an evaluation)."""
    return msgspec.json.encode(value)


def evaluate_claimed(tx: TenantTx, event_ids: list[int],
                     load: BatchLoader = load_facts_of_subjects) -> EvaluationReport:
    report = EvaluationReport()
    rows = tx.conn.execute(_BATCH, [event_ids]).fetchall()
    if not rows:
        return report
    # Phase 1 once per (product, event type, trigger type) of the batch, in one statement.
    keys = [(str(r[1]), str(r[3]), None if r[4] is None else str(r[4])) for r in rows]
    rules_for = candidate_indexes_of(tx, keys)
    runs: dict[int, Evaluation] = {}  # by event: its phases 2-4, driven below
    subject_of: dict[int, int] = {}
    wants: dict[int, WantedFacts] = {}
    outcomes: dict[int, Evaluated] = {}
    claims: dict[str, list[Any]] = {"rule_ids": [], "versions": [], "subject_ids": [],
                                    "event_ids": [], "occurred": []}
    product_of: dict[int, str] = {}
    occurred: dict[int, Any] = {}
    for row in rows:
        (event_id, product, subject_id, event_type, trigger_type, changes, metadata, occurred_at,
         lag, kind, external_id, title, status, assignees) = row
        key = (str(product), str(event_type), None if trigger_type is None else str(trigger_type))
        event = EventFacts(
            event_type=key[1], trigger_type=key[2], subject_kind=str(kind),
            metadata=dict(metadata or {}),  # type: ignore[call-overload]
            changes=dict(changes or {}),  # type: ignore[call-overload]
            subject_facts={"subject.kind": kind, "subject.external_id": external_id,
                           "subject.title": title, "subject.status": status,
                           "subject.assignees": list(assignees or [])},  # type: ignore[call-overload]
        )
        eid = int(str(event_id))
        subject_of[eid] = int(str(subject_id))
        product_of[eid] = key[0]
        occurred[eid] = occurred_at
        runs[eid] = evaluation(rules_for[key], event)
        wants[eid] = next(runs[eid])
        report.lags.append(float(str(lag)))
    # Phases 3 and 4 in step for the whole batch: what every event wants is loaded in one
    # call (one query per family), not one per event.
    while runs:
        by_subject: dict[int, WantedFacts] = {}
        for eid, wanted in wants.items():
            if wanted:
                sid = subject_of[eid]
                by_subject[sid] = by_subject.get(sid, WantedFacts()).union(wanted)
        loaded = load(tx, by_subject) if by_subject else {}
        for eid in list(runs):
            try:
                wants[eid] = runs[eid].send(loaded.get(subject_of[eid], {}) if wants[eid] else {})
            except StopIteration as done:
                outcomes[eid] = done.value
                del runs[eid], wants[eid]
    trace_ids: list[int] = []
    traces: list[str] = []
    for eid, evaluated in outcomes.items():
        for result in evaluated.outcomes:
            if result.fired:
                claims["rule_ids"].append(result.rule_id)
                claims["versions"].append(result.rule_version)
                claims["subject_ids"].append(subject_of[eid])
                claims["event_ids"].append(eid)
                claims["occurred"].append(occurred[eid])
        trace_ids.append(eid)
        traces.append(_compact_json(evaluated.trace()).decode())
    if claims["rule_ids"]:
        for ledger_id, event_id in tx.conn.execute(_CLAIM, claims).fetchall():
            tx.claims_to_prepare.append((product_of[int(str(event_id))], int(str(ledger_id))))
            report.claims += 1
    tx.conn.execute(_DONE, {"ids": trace_ids, "traces": traces})
    report.evaluated = len(outcomes)
    return report
