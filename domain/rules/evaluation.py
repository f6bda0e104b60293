"""Phases 2-4 of evaluating one event against the rules phase 1 (SQL) returned.

Phase 2 (in memory, free): drop rules whose trigger filter does not match the event (the
subject kind, the event metadata such as the form submitted). Phase 3: load, in ONE call
of the loader for all survivors, the stored facts their trigger conditions reference, and
evaluate those conditions (a rule whose conditions already fail on the facts at hand, the
event's changes and the subject row, asks for nothing). Phase 4: load (in one more call)
whatever further facts the filter criteria of the rules still standing reference, and
evaluate them. A phase that needs no stored fact does not call the loader at all.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

from domain.rules.conditions import CompiledTree, Facts, LeafTrace, WantedFacts, stored_leaf
from domain.rules.definitions import RuleDefinition

__all__ = [
    "Candidate",
    "Evaluated",
    "Evaluation",
    "EventFacts",
    "Phase",
    "RuleOutcome",
    "Split",
    "TriggerGroup",
    "TriggerIndex",
    "evaluation",
    "metadata_mismatch",
    "metadata_mismatch_in_short",
]


class Phase(IntEnum):
    METADATA = 2
    CONDITIONS = 3
    FILTERS = 4


@dataclass(frozen=True)
class Candidate:
    """A rule as phase 1 returned it, with what phases 3 and 4 ask of it for every event
    worked out once (a candidate is kept in process per immutable rule version)."""

    id: int
    version: int
    definition: RuleDefinition
    conditions: CompiledTree = field(init=False, repr=False, compare=False)
    filters: CompiledTree = field(init=False, repr=False, compare=False)
    condition_facts: WantedFacts = field(init=False, repr=False, compare=False)
    filter_facts: WantedFacts = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        d = self.definition
        object.__setattr__(self, "conditions", d.compiled_conditions())
        object.__setattr__(self, "filters", d.compiled_filters())
        object.__setattr__(self, "condition_facts", d.condition_facts())
        object.__setattr__(self, "filter_facts", d.filter_facts())


@dataclass(frozen=True)
class EventFacts:
    """What is known of an event without loading anything: its type, trigger, metadata and
    changes, and the subject row's facts (subject.status, subject.assignees, ...)."""

    event_type: str  # created | updated
    trigger_type: str | None
    subject_kind: str
    metadata: Mapping[str, object] = field(default_factory=dict)
    changes: Mapping[str, object] = field(default_factory=dict)
    subject_facts: Mapping[str, object] = field(default_factory=dict)

    def known(self) -> dict[str, object]:
        facts = dict(self.subject_facts)
        facts.update({f"event.{k}": v for k, v in self.metadata.items()})
        return facts


class RuleOutcome(NamedTuple):
    """One rule's result for one event (a named tuple: one is made per rule that reaches
    phase 3, for every event)."""

    rule_id: int
    rule_version: int
    fired: bool
    phase: Phase  # where it stopped, or FILTERS when it fired
    reason: str
    conditions: tuple[LeafTrace, ...] = ()
    filters: tuple[LeafTrace, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"rule_id": self.rule_id, "rule_version": self.rule_version, "fired": self.fired,
                "phase": int(self.phase), "reason": self.reason,
                "conditions": [t.to_json() for t in self.conditions],
                "filters": [t.to_json() for t in self.filters]}

    def stored_json(self) -> dict[str, Any]:
        """The compact form stored in the event's trace: the rule and version, where it
        stopped, and each condition's path, result and value seen (LeafTrace.stored_json);
        the reason follows from the phase and no empty list is written."""
        rule_id, rule_version, fired, phase, _, conditions, filters = self
        out: dict[str, Any] = {"rule_id": rule_id, "rule_version": rule_version,
                               "fired": fired, "phase": _PHASES[phase]}
        if conditions:
            out["conditions"] = [stored_leaf(t) for t in conditions]
        if filters:
            out["filters"] = [stored_leaf(t) for t in filters]
        return out


_PHASES = {p: int(p) for p in Phase}


def metadata_mismatch(rule: RuleDefinition, event: EventFacts) -> str | None:
    """Why phase 2 drops a rule for this event, or None when its trigger filter matches."""
    kind = rule.trigger.subject_kind
    if kind is not None and kind != event.subject_kind:
        return f"subject kind is {event.subject_kind!r}, the rule wants {kind!r}"
    for key, wanted in rule.trigger.metadata.items():
        if key not in event.metadata:
            return f"the event has no metadata {key!r} (the rule wants {wanted!r})"
        if event.metadata[key] != wanted or isinstance(event.metadata[key], bool) != isinstance(
                wanted, bool):
            return f"metadata {key} is {event.metadata[key]!r}, the rule wants {wanted!r}"
    return None


def metadata_mismatch_in_short(rule: RuleDefinition, event: EventFacts,
                               said: dict[object, str] | None = None) -> str | None:
    """metadata_mismatch naming the event's side only (what the rule wants is in its
    definition), so the rules phase 2 drops for the same reason are traced together.
    ``said`` keeps the reasons already worded for this event: they depend on the event
    alone (its kind, or one metadata key), so a batch's many filters word each once."""
    said = {} if said is None else said
    kind = rule.trigger.subject_kind
    if kind is not None and kind != event.subject_kind:
        if None not in said:
            said[None] = f"subject kind is {event.subject_kind!r}"
        return said[None]
    metadata = event.metadata
    for key, wanted in rule.trigger.metadata.items():
        if key not in metadata:
            if ("no", key) not in said:
                said["no", key] = f"the event has no metadata {key!r}"
            return said["no", key]
        seen = metadata[key]
        if seen != wanted or isinstance(seen, bool) != isinstance(wanted, bool):
            if key not in said:
                said[key] = f"metadata {key} is {seen!r}"
            return said[key]
    return None


_SPLITS_KEPT = 512  # phase-2 answers kept per index (cleared when full)
_ABSENT = object()
Split = tuple[list["Candidate"], dict[str, list["TriggerGroup"]]]


class TriggerIndex:
    """Phase 2 for many events against the same candidates (a batch's (product, type,
    trigger)): the candidates grouped by their trigger filter (subject kind and metadata),
    so an event is matched once per distinct filter, not once per rule; and the answer for
    an event depends only on its subject kind and the values of the metadata keys the
    filters name, so it is kept per such signature (indexes live in process, shared by the
    worker's threads: the answers are never mutated)."""

    def __init__(self, candidates: Sequence[Candidate]) -> None:
        self.candidates = list(candidates)
        groups: dict[str, list[Candidate]] = {}
        for c in self.candidates:
            groups.setdefault(c.definition.trigger_filter(), []).append(c)
        self.groups = [TriggerGroup(members[0].definition, members) for members in groups.values()]
        self._keys = tuple(sorted({k for g in self.groups for k in g.definition.trigger.metadata}))
        self._splits: dict[tuple[object, ...], Split] = {}

    def split(self, event: EventFacts) -> Split:
        """The candidates whose trigger filter matches the event (in order), and the groups
        of the others by why not."""
        metadata = event.metadata
        signature: list[object] = [event.subject_kind]
        for key in self._keys:
            seen = metadata.get(key, _ABSENT)
            # Only values whose equality is their identity as traced (a float's repr can
            # differ between equal values: 0.0 and -0.0) make a signature.
            if seen is not _ABSENT and seen is not None and type(seen) not in (str, int, bool):
                return self._split(event)
            signature.append(type(seen))
            signature.append(seen)
        sig = tuple(signature)
        found = self._splits.get(sig)
        if found is None:
            found = self._split(event)
            if len(self._splits) >= _SPLITS_KEPT:
                self._splits.clear()
            self._splits[sig] = found
        return found

    def _split(self, event: EventFacts) -> Split:
        kept: list[Candidate] = []
        dropped: dict[str, list[TriggerGroup]] = {}
        said: dict[object, str] = {}
        for group in self.groups:
            why = metadata_mismatch_in_short(group.definition, event, said)
            if why is None:
                kept.extend(group.members)
            else:
                dropped.setdefault(why, []).append(group)
        if len(kept) < len(self.candidates):
            kept.sort(key=_by_id)
        return kept, dropped


def _by_id(c: Candidate) -> int:
    return c.id


@dataclass(frozen=True)
class TriggerGroup:
    """Candidates with the same trigger filter, and their [id, version] pairs as traced."""

    definition: RuleDefinition
    members: list[Candidate]
    traced: list[list[int]] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "traced", [[c.id, c.version] for c in self.members])


@dataclass(frozen=True)
class Evaluated:
    """One event's result: an outcome for every rule that reached phase 3 (in the
    candidates' order), and the rules phase 2 dropped, by trigger filter, with why."""

    outcomes: list[RuleOutcome]
    unmatched: dict[str, list[TriggerGroup]]

    def trace(self) -> list[dict[str, Any]]:
        """The trace stored on the event: each rule that reached phase 3 (RuleOutcome
        .stored_json: every condition with the value seen), and for the rules phase 2
        dropped one compact entry per reason: why, and the [id, version] of each rule."""
        return self.outcome_trace() + self.unmatched_trace()

    def outcome_trace(self) -> list[dict[str, Any]]:
        """The first part of ``trace``: the rules that reached phase 3."""
        return [o.stored_json() for o in self.outcomes]

    def unmatched_trace(self) -> list[dict[str, Any]]:
        """The second part of ``trace``: the rules phase 2 dropped, by reason. It depends
        only on ``unmatched``, which events with the same phase-2 answer share (TriggerIndex
        keeps the answers), so its encoding can be kept with it."""
        out = []
        for why, groups in self.unmatched.items():
            rules = groups[0].traced if len(groups) == 1 else [r for g in groups for r in g.traced]
            out.append({"phase": _METADATA, "fired": False, "reason": why, "rules": rules})
        return out


_METADATA = int(Phase.METADATA)


# One event's evaluation as a generator: it yields the stored facts it wants (phase 3, then
# phase 4; an empty WantedFacts when it wants nothing more), is sent their values, and
# returns the result. Whoever drives it decides how to load: the wants of a whole batch in
# one query per family (db/rules/evaluations.py).
Evaluation = Generator[WantedFacts, Mapping[str, object], Evaluated]


def evaluation(index: TriggerIndex, event: EventFacts) -> Evaluation:
    """Phases 2-4 as a generator (see Evaluation): yields exactly twice."""
    survivors, unmatched = index.split(event)

    facts = event.known()

    # Phase 3. A rule whose conditions already fail on the facts at hand (a change it
    # wants did not happen, a status it wants is another) loads nothing. A rule whose
    # conditions want no stored fact loads nothing either way: it is not prejudged.
    # ``at_hand`` sees ``facts`` as they grow: what is loaded is added to that same dict.
    at_hand = Facts(facts, event.changes)
    decided_false: set[int] = set()
    needed: list[WantedFacts] = []
    for c in survivors:
        needs = c.condition_facts
        if needs:
            if c.conditions.prejudge(at_hand) is False:
                decided_false.add(c.id)
            else:
                needed.append(needs)
    asked = WantedFacts.union_of(needed)
    facts.update((yield asked) or {})
    passed: list[tuple[Candidate, tuple[LeafTrace, ...]]] = []
    outcomes: list[RuleOutcome] = []
    for c in survivors:
        held, trace = c.conditions.evaluate(at_hand, not_loaded=c.id in decided_false)
        if held:
            passed.append((c, tuple(trace)))
        else:
            outcomes.append(RuleOutcome(c.id, c.version, False, Phase.CONDITIONS,
                                        "trigger conditions do not hold", tuple(trace)))
    if not passed:
        yield _NOTHING_WANTED
        return Evaluated(outcomes, unmatched)
    wanted = WantedFacts.union_of([c.filter_facts for c, _ in passed])
    facts.update((yield wanted.minus(asked)) or {})
    for c, condition_trace in passed:
        held, trace = c.filters.evaluate(at_hand)
        outcomes.append(RuleOutcome(
            c.id, c.version, held, Phase.FILTERS,
            "fired" if held else "filter criteria do not hold", condition_trace, tuple(trace)))
    if len(passed) < len(survivors):  # back in the survivors' (the candidates') order
        position = {c.id: i for i, c in enumerate(survivors)}
        outcomes.sort(key=lambda o: position[o.rule_id])
    return Evaluated(outcomes, unmatched)


_NOTHING_WANTED = WantedFacts()
