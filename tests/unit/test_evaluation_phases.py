"""Phases 2-4 in memory: the metadata filter drops rules before anything is loaded, each
later phase calls the loader at most once with only the facts its rules reference."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from domain.rules.conditions import SEEN_MAX, WantedFacts
from domain.rules.definitions import parse_rule
from domain.rules.evaluation import (
    Candidate,
    Evaluated,
    EventFacts,
    Phase,
    RuleOutcome,
    TriggerIndex,
    evaluation,
    metadata_mismatch,
)

STORED: dict[str, object] = {
    "field.amount": 2_000_000,
    "field.channel": "web",
    "form.intake.q1": "yes",
    "form.intake.q2": "no",
    "hierarchy.region": "north",
    "hierarchy.department": "fin",
}


class RecordingLoader:
    """Answers from STORED and records every call (what was asked)."""

    def __init__(self) -> None:
        self.calls: list[WantedFacts] = []

    def __call__(self, wanted: WantedFacts) -> Mapping[str, object]:
        self.calls.append(wanted)
        return {name: STORED[name] for name in wanted.names() if name in STORED}


def evaluate_event(candidates: Sequence[Candidate], event: EventFacts,
                   load: Callable[[WantedFacts], Mapping[str, object]]) -> list[RuleOutcome]:
    """Drive ``evaluation`` for one event as db/rules/evaluations.py drives a batch: each
    want answered by ``load``; one outcome per candidate, in their order (phase 2's with
    the full reason)."""
    run = evaluation(TriggerIndex(candidates), event)
    wanted = next(run)
    while True:
        try:
            wanted = run.send(load(wanted) if wanted else {})
        except StopIteration as done:
            result: Evaluated = done.value
            break
    by_id = {o.rule_id: o for o in result.outcomes}
    for groups in result.unmatched.values():
        by_id.update({c.id: RuleOutcome(c.id, c.version, False, Phase.METADATA,
                                        str(metadata_mismatch(c.definition, event)))
                      for group in groups for c in group.members})
    return [by_id[c.id] for c in candidates]

def no_check(text: str) -> list[str]:
    return []


def rule(rule_id: int, *, kind: str = "updated", trigger: dict[str, Any] | None = None,
         conditions: list[dict[str, Any]] | None = None,
         filters: list[dict[str, Any]] | None = None) -> Candidate:
    definition = {
        "name": f"rule {rule_id}", "product": "fraud", "kind": kind,
        "trigger": trigger if trigger is not None else {"types": ["form_submitted"]},
        "conditions": {"all": conditions or []}, "filters": {"all": filters or []},
        "actions": {"channels": ["in_app"], "category": "case_update",
                    "recipients": [{"type": "assignees"}],
                    "template": {"title": "t", "body": "b"}},
    }
    return Candidate(rule_id, 3, parse_rule(definition, no_check))


EVENT = EventFacts(event_type="updated", trigger_type="form_submitted", subject_kind="case",
                   metadata={"form": "intake"},
                   changes={"subject.status": {"from": "open", "to": "review"}},
                   subject_facts={"subject.status": "review", "subject.kind": "case"})


def test_phase_two_drops_by_metadata_and_subject_kind_without_loading() -> None:
    candidates = [
        rule(1, trigger={"types": ["form_submitted"], "metadata": {"form": "exit"}},
             conditions=[{"fact": "field.amount", "op": "greater", "value": 1}]),
        rule(2, trigger={"types": ["form_submitted"], "subject_kind": "permit"},
             conditions=[{"fact": "hierarchy.region", "op": "equals", "value": "north"}]),
        rule(3, trigger={"types": ["form_submitted"], "metadata": {"channel": "api"}}),
    ]
    loader = RecordingLoader()
    outcomes = evaluate_event(candidates, EVENT, loader)
    assert loader.calls == []
    assert [(o.rule_id, o.fired, o.phase) for o in outcomes] == [
        (1, False, Phase.METADATA), (2, False, Phase.METADATA), (3, False, Phase.METADATA)]
    assert "'intake', the rule wants 'exit'" in outcomes[0].reason
    assert "subject kind is 'case'" in outcomes[1].reason
    assert "no metadata 'channel'" in outcomes[2].reason


def test_the_loader_is_called_once_per_phase_with_only_the_referenced_facts() -> None:
    candidates = [
        rule(1, trigger={"types": ["form_submitted"], "metadata": {"form": "intake"}},
             conditions=[{"fact": "form.intake.q1", "op": "equals", "value": "yes"},
                         {"fact": "field.amount", "op": "greater", "value": 1_000_000}],
             filters=[{"fact": "hierarchy.region", "op": "in", "value": ["north", "south"]}]),
        rule(2, conditions=[{"fact": "field.amount", "op": "less", "value": 10}],
             filters=[{"fact": "hierarchy.department", "op": "equals", "value": "fin"}]),
        rule(3, conditions=[{"fact": "subject.status", "op": "changed_to", "value": "review"},
                            {"fact": "field.channel", "op": "changed"}]),
        rule(4, trigger={"types": ["form_submitted"], "metadata": {"form": "exit"}},
             conditions=[{"fact": "form.exit.reason", "op": "not_empty"}]),
        rule(5, conditions=[{"fact": "subject.status", "op": "changed_to", "value": "review"},
                            {"fact": "event.form", "op": "equals", "value": "intake"}],
             filters=[{"fact": "form.intake.q2", "op": "equals", "value": "no"},
                      {"fact": "field.amount", "op": "greater", "value": 5}]),
    ]
    loader = RecordingLoader()
    outcomes = {o.rule_id: o for o in evaluate_event(candidates, EVENT, loader)}
    # Phase 3: one call for the survivors' trigger conditions (rule 4 dropped in phase 2;
    # changed-facts come from the event, subject.* and event.* are at hand).
    # Phase 4: one call for the filters of rules 1 and 5 (rule 2 stopped in phase 3; its
    # filter fact is never loaded), less what phase 3 already asked.
    assert loader.calls == [
        WantedFacts(frozenset({"amount"}), frozenset({("intake", "q1")}), frozenset()),
        WantedFacts(frozenset(), frozenset({("intake", "q2")}), frozenset({"region"})),
    ]
    assert (outcomes[1].fired, outcomes[1].phase) == (True, Phase.FILTERS)
    assert (outcomes[2].fired, outcomes[2].phase) == (False, Phase.CONDITIONS)
    assert (outcomes[3].fired, outcomes[3].phase) == (False, Phase.CONDITIONS)
    assert (outcomes[4].fired, outcomes[4].phase) == (False, Phase.METADATA)
    assert (outcomes[5].fired, outcomes[5].phase) == (True, Phase.FILTERS)
    trace = outcomes[1].to_json()
    assert trace["conditions"][0] == {"path": "conditions.all[0]", "fact": "form.intake.q1",
                                      "op": "equals", "expected": "yes", "seen": "yes",
                                      "result": True}
    assert trace["filters"][0]["seen"] == "north" and trace["rule_version"] == 3
    assert outcomes[3].conditions[1].missing and outcomes[3].reason == "trigger conditions do not hold"


def test_a_phase_that_needs_nothing_stored_does_not_call_the_loader() -> None:
    candidates = [rule(1, kind="created", trigger={},
                       conditions=[{"fact": "subject.status", "op": "equals", "value": "review"}])]
    created = EventFacts("created", None, "case", subject_facts={"subject.status": "review"})
    loader = RecordingLoader()
    (outcome,) = evaluate_event(candidates, created, loader)
    assert loader.calls == [] and outcome.fired


def test_a_missing_fact_gives_its_defined_result_in_the_trace() -> None:
    candidates = [rule(1, conditions=[{"fact": "field.unknown", "op": "not_equals", "value": 1},
                                      {"fact": "form.intake.q9", "op": "empty"}],
                       filters=[{"fact": "hierarchy.team", "op": "equals", "value": "a"}])]
    loader = RecordingLoader()
    (outcome,) = evaluate_event(candidates, EVENT, loader)
    assert [t.missing for t in outcome.conditions] == [True, True]
    assert [t.result for t in outcome.conditions] == [True, True]
    assert (outcome.fired, outcome.phase, outcome.reason) == (
        False, Phase.FILTERS, "filter criteria do not hold")
    assert len(loader.calls) == 2


def test_a_rule_already_failing_on_the_facts_at_hand_loads_nothing() -> None:
    candidates = [
        rule(1, conditions=[{"fact": "subject.status", "op": "changed_to", "value": "closed"},
                            {"fact": "field.amount", "op": "greater", "value": 1}]),
        rule(2, conditions=[{"any": [{"fact": "subject.status", "op": "changed_to", "value": "closed"},
                                     {"fact": "hierarchy.region", "op": "equals", "value": "north"}]}]),
    ]
    loader = RecordingLoader()
    first, second = evaluate_event(candidates, EVENT, loader)
    # Rule 1's status moved to review, not closed: its amount is never asked for. Rule 2's
    # "any" still depends on the region, which is loaded.
    assert loader.calls == [WantedFacts(levels=frozenset({"region"}))]
    assert (first.fired, first.phase) == (False, Phase.CONDITIONS)
    assert first.conditions[1].to_json() == {
        "path": "conditions.all[1]", "fact": "field.amount", "op": "greater", "expected": 1,
        "result": False, "missing": True,
        "reason": "not loaded: the facts at hand already decide the result"}
    assert second.fired and second.conditions[1].seen == "north"


def test_a_batch_driver_gets_the_same_outcomes_and_a_compact_trace() -> None:
    """The generator form (what db/rules/evaluations.py drives for a whole batch) yields what each
    phase wants, and its stored trace groups phase 2's drops by reason."""
    candidates = [
        rule(1, trigger={"types": ["form_submitted"], "metadata": {"form": "exit"}}),
        rule(2, trigger={"types": ["form_submitted"], "metadata": {"form": "intake"}},
             conditions=[{"fact": "form.intake.q1", "op": "equals", "value": "yes"}],
             filters=[{"fact": "hierarchy.region", "op": "equals", "value": "north"}]),
        rule(3, trigger={"types": ["form_submitted"], "metadata": {"form": "appeal"}}),
        rule(4, trigger={"types": ["form_submitted"], "subject_kind": "permit"}),
    ]
    index = TriggerIndex(candidates)
    run = evaluation(index, EVENT)
    asked = [next(run)]
    asked.append(run.send(RecordingLoader()(asked[0])))
    try:
        run.send(RecordingLoader()(asked[1]))
        raise AssertionError("the evaluation yields exactly twice")
    except StopIteration as done:
        result: Evaluated = done.value
    assert asked == [WantedFacts(forms=frozenset({("intake", "q1")})),
                     WantedFacts(levels=frozenset({"region"}))]
    assert result.trace() == [
        {"rule_id": 2, "rule_version": 3, "fired": True, "phase": 4,
         "conditions": [{"path": "conditions.all[0]", "result": True, "seen": "yes"}],
         "filters": [{"path": "filters.all[0]", "result": True, "seen": "north"}]},
        {"phase": 2, "fired": False, "reason": "metadata form is 'intake'", "rules": [[1, 3], [3, 3]]},
        {"phase": 2, "fired": False, "reason": "subject kind is 'case'", "rules": [[4, 3]]},
    ]


def test_a_long_text_value_is_cut_in_the_stored_trace_with_its_length() -> None:
    long_answer = "yes, " + "x" * 500
    candidates = [rule(1, conditions=[{"fact": "form.intake.q1", "op": "contains", "value": "yes"}])]
    (outcome,) = evaluate_event(candidates, EVENT, lambda wanted: {"form.intake.q1": long_answer})
    assert outcome.fired and outcome.to_json()["conditions"][0]["seen"] == long_answer
    stored = outcome.stored_json()["conditions"][0]
    assert stored["seen"] == long_answer[:SEEN_MAX] + "…" and stored["seen_length"] == len(long_answer)


def test_phase_two_answers_are_kept_per_signature_and_the_trace_encodes_as_a_whole() -> None:
    """TriggerIndex keeps its phase-2 answer per (subject kind, metadata values the filters
    name); an event with another value, or a value of another type (True is not 1), gets
    its own answer; and db/rules/evaluations.py's stored trace, its phase-2 part named and kept
    apart, is the whole trace once the part is spliced back in."""
    import json

    from db.rules.evaluations import _encode, _trace_json, expand_trace

    index = TriggerIndex([
        rule(1, trigger={"types": ["form_submitted"], "metadata": {"form": "exit"}}),
        rule(2, trigger={"types": ["form_submitted"], "metadata": {"form": "intake"}},
             conditions=[{"fact": "subject.status", "op": "equals", "value": "review"}]),
        rule(3, trigger={"types": ["form_submitted"], "metadata": {"n": 1}}),
    ])
    first = index.split(EVENT)
    assert index.split(EventFacts(**{**EVENT.__dict__, "metadata": dict(EVENT.metadata)})) is first
    other = index.split(EventFacts(**{**EVENT.__dict__, "metadata": {"form": "exit"}}))
    assert [c.id for c in other[0]] == [1] and [c.id for c in first[0]] == [2]
    as_bool = index.split(EventFacts(**{**EVENT.__dict__, "metadata": {"form": "intake", "n": True}}))
    as_int = index.split(EventFacts(**{**EVENT.__dict__, "metadata": {"form": "intake", "n": 1}}))
    assert [c.id for c in as_bool[0]] == [2] and [c.id for c in as_int[0]] == [2, 3]
    for event in (EVENT, EventFacts(**{**EVENT.__dict__, "metadata": {"form": "exit"}})):
        for _ in range(2):  # the second time from the kept phase-2 part
            run = evaluation(index, event)
            assert not next(run)  # nothing stored is wanted
            try:
                run.send({})
                run.send({})
            except StopIteration as done:
                evaluated: Evaluated = done.value
            parts: dict[bytes, bytes] = {}
            stored = json.loads(_trace_json(evaluated, parts))
            assert len(parts) == 1 and any("trace_part" in entry for entry in stored)
            spliced = expand_trace(stored, {d: json.loads(t) for d, t in parts.items()})
            assert spliced == json.loads(_encode(evaluated.trace()))
