"""Rule conditions: a closed JSON form, validated on save and evaluated with a trace.

A condition tree is a group ``{"all": [...]}`` or ``{"any": [...]}`` whose items are
groups again (at most MAX_DEPTH deep) or leaves ``{"fact": ..., "op": ..., "value": ...}``.
Nothing a tenant writes is evaluated as code: the operators are the closed set below.

Facts are named as in the platform's vocabulary (see ``parse_fact``). Values seen are the
JSON values stored for the subject; dates are ISO ``YYYY-MM-DD`` strings.

A missing fact (the subject has no such field, answer or placement) is a defined result,
never an exception:
- every positive comparison is false: equals, less, greater, less_or_equal,
  greater_or_equal, in, contains, before, after;
- the negations are the exact negation of their positive operator: not_equals and not_in
  are TRUE for a missing fact (a value that is absent is not equal to anything);
- empty is true and not_empty is false (absent, null, "", [] and {} are all empty);
- changed, changed_to and changed_from look at the event's changes, not at the subject:
  a fact the event did not change is "missing" there and all three are false.
A value of the wrong type (a string compared with ``less`` to a number, a date compared
with something that is not a date) is false with the reason in the trace: a negation of
such a mismatch (not_equals of "5" and 5) is true, as equality of different types is false.
An empty ``all`` group holds and an empty ``any`` group does not.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from typing import Any, NamedTuple

from domain.events.json_input import NUMBER_WORDS, is_finite_number

__all__ = [
    "CHANGE_OPS",
    "COMPARE_OPS",
    "DATE_OPS",
    "EQUALITY_OPS",
    "LEVEL",
    "LIST_OPS",
    "MAX_DEPTH",
    "MAX_LEAVES",
    "MAX_LIST_VALUES",
    "MAX_NODES",
    "MAX_TEXT_VALUE",
    "NAME",
    "NOT_LOADED",
    "OPERATORS",
    "SEEN_MAX",
    "STORED_FAMILIES",
    "SUBJECT_FACTS",
    "CompiledTree",
    "Fact",
    "Facts",
    "LeafTrace",
    "PathError",
    "Test",
    "WantedFacts",
    "evaluate",
    "facts_to_load",
    "is_scalar",
    "leaf_test",
    "parse_fact",
    "prejudge",
    "stored",
    "stored_leaf",
    "unholdable_number",
    "validate",
]

MAX_DEPTH = 5  # nested groups, the outermost counting as 1
MAX_LEAVES = 50  # leaves in one tree
# Nodes of one tree, groups and leaves together: a tree of 180,000 empty groups had no leaf
# to count, and cost seconds to compile and a megabyte of scan statement.
MAX_NODES = 100
MAX_LIST_VALUES = 200  # items in the value list of in / not_in
MAX_TEXT_VALUE = 1000  # characters of one string value

NAME = r"[A-Za-z0-9_][A-Za-z0-9_\-]{0,63}"
LEVEL = r"[a-z][a-z0-9_]{0,31}"
STORED_FAMILIES = ("field", "form", "hierarchy")  # loaded from the database; the rest is at hand
SUBJECT_FACTS = ("status", "title", "kind", "external_id", "assignees")
_FACT = re.compile(
    rf"field\.(?P<field>{NAME})"
    rf"|form\.(?P<form>{NAME})\.(?P<answer>{NAME})"
    rf"|hierarchy\.(?P<level>{LEVEL})"
    rf"|subject\.(?P<subject>{'|'.join(SUBJECT_FACTS)})"
    rf"|event\.(?P<event>{NAME})"
)

COMPARE_OPS = ("less", "greater", "less_or_equal", "greater_or_equal")
EQUALITY_OPS = ("equals", "not_equals")
LIST_OPS = ("in", "not_in")
DATE_OPS = ("before", "after")
CHANGE_OPS = ("changed", "changed_to", "changed_from")
OPERATORS = (*EQUALITY_OPS, *COMPARE_OPS, *LIST_OPS, "contains", "empty", "not_empty",
             *CHANGE_OPS, *DATE_OPS)
_NO_VALUE_OPS = ("empty", "not_empty", "changed")


# --- facts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    """A parsed fact name: its family and the key within the family."""

    name: str
    family: str  # field | form | hierarchy | subject | event
    key: tuple[str, ...]


def parse_fact(name: object) -> Fact | None:
    """The fact a name denotes, or None when it is not in the vocabulary."""
    if not isinstance(name, str):
        return None
    return _parse_fact(name)


@lru_cache(maxsize=8192)  # the same few hundred names, parsed for every leaf evaluated
def _parse_fact(name: str) -> Fact | None:
    m = _FACT.fullmatch(name)
    if m is None:
        return None
    if m["field"]:
        return Fact(name, "field", (m["field"],))
    if m["form"]:
        return Fact(name, "form", (m["form"], m["answer"]))
    if m["level"]:
        return Fact(name, "hierarchy", (m["level"],))
    if m["subject"]:
        return Fact(name, "subject", (m["subject"],))
    return Fact(name, "event", (m["event"],))


@dataclass(frozen=True)
class WantedFacts:
    """The stored facts to load, by family (subject.* and event.* are always at hand)."""

    fields: frozenset[str] = frozenset()
    forms: frozenset[tuple[str, str]] = frozenset()
    levels: frozenset[str] = frozenset()

    @staticmethod
    def of(fact_names: set[str] | frozenset[str]) -> WantedFacts:
        fields, forms, levels = set(), set(), set()
        for name in fact_names:
            fact = parse_fact(name)
            if fact is None:
                continue
            if fact.family == "field":
                fields.add(fact.key[0])
            elif fact.family == "form":
                forms.add((fact.key[0], fact.key[1]))
            elif fact.family == "hierarchy":
                levels.add(fact.key[0])
        return WantedFacts(frozenset(fields), frozenset(forms), frozenset(levels))

    def names(self) -> frozenset[str]:
        return frozenset({f"field.{n}" for n in self.fields}
                         | {f"form.{f}.{a}" for f, a in self.forms}
                         | {f"hierarchy.{lv}" for lv in self.levels})

    def families(self) -> tuple[str, ...]:
        return tuple(name for name, keys in (("field", self.fields), ("form", self.forms),
                                             ("hierarchy", self.levels)) if keys)

    def __bool__(self) -> bool:
        return bool(self.fields or self.forms or self.levels)

    def minus(self, other: WantedFacts) -> WantedFacts:
        return WantedFacts(self.fields - other.fields, self.forms - other.forms,
                           self.levels - other.levels)

    @staticmethod
    def union_of(wants: list[WantedFacts]) -> WantedFacts:
        """Every key of all of them, in one pass (not a new set per pair)."""
        if not wants:
            return _NOTHING
        if len(wants) == 1:
            return wants[0]
        fields: set[str] = set()
        forms: set[tuple[str, str]] = set()
        levels: set[str] = set()
        for w in wants:
            fields |= w.fields
            forms |= w.forms
            levels |= w.levels
        return WantedFacts(frozenset(fields), frozenset(forms), frozenset(levels))

    def union(self, other: WantedFacts) -> WantedFacts:
        return WantedFacts(self.fields | other.fields, self.forms | other.forms,
                           self.levels | other.levels)


_NOTHING = WantedFacts()


# --- validation ----------------------------------------------------------------------


@dataclass(frozen=True)
class PathError:
    """One thing wrong with a definition, at a JSON path such as ``conditions.all[1].op``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


_NUMBER = (int, float)


def _is_number(v: object) -> bool:
    return isinstance(v, _NUMBER) and not isinstance(v, bool)


def is_scalar(v: object) -> bool:
    return v is None or isinstance(v, str | bool | int | float)


def _iso_date(v: object) -> date | None:
    if not isinstance(v, str) or len(v) != 10:
        return None
    try:
        return date.fromisoformat(v)
    except ValueError:
        return None


def unholdable_number(value: object) -> bool:
    """A number (or a list holding one) that no double holds: NaN, an infinity, an integer
    past ±1.8e308 (a comparison with it would raise, and jsonb cannot store NaN)."""
    if isinstance(value, list):
        return any(unholdable_number(v) for v in value)
    return _is_number(value) and not is_finite_number(value)


def _value_problem(op: str, has_value: bool, value: object) -> str | None:
    """What is wrong with a leaf's value for its operator, or None."""
    if op in _NO_VALUE_OPS:
        return None if not has_value or value is None else f"{op} takes no value"
    if not has_value:
        return f"{op} needs a value"
    if unholdable_number(value):
        return NUMBER_WORDS
    if isinstance(value, str) and len(value) > MAX_TEXT_VALUE:
        return f"a value is at most {MAX_TEXT_VALUE} characters"
    if op in EQUALITY_OPS or op in ("changed_to", "changed_from", "contains"):
        if op == "contains" and value is None:
            return "contains needs a string, number or boolean"
        if is_scalar(value):
            return None
        return f"{op} needs a string, number, boolean or null, not {_kind(value)}"
    if op in COMPARE_OPS:
        return None if _is_number(value) else f"{op} needs a number, not {_kind(value)}"
    if op in LIST_OPS:
        if not isinstance(value, list) or not value:
            return f"{op} needs a non-empty list of values"
        if len(value) > MAX_LIST_VALUES:
            return f"{op} takes at most {MAX_LIST_VALUES} values"
        if not all(is_scalar(v) for v in value):
            return f"{op} needs a list of strings, numbers, booleans or nulls"
        return None
    if op in DATE_OPS:
        return None if _iso_date(value) else f"{op} needs a date YYYY-MM-DD, not {value!r}"
    raise AssertionError(op)  # pragma: no cover - OPERATORS is closed


def _kind(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if _is_number(v):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def validate(tree: object, path: str = "conditions") -> list[PathError]:
    """Every error in a condition tree, each with its JSON path (empty: the tree is valid)."""
    errors: list[PathError] = []
    leaves = [0]
    nodes = [0]

    def counted(at: str) -> bool:
        """Count a node; False once the tree holds too many (the rest is not walked)."""
        nodes[0] += 1
        if nodes[0] == MAX_NODES + 1:
            errors.append(PathError(at, f"a tree holds at most {MAX_NODES} groups and conditions "
                                        "together"))
        return nodes[0] <= MAX_NODES

    def group(node: object, at: str, depth: int) -> None:
        if not counted(at):
            return
        if not isinstance(node, dict) or len(node) != 1 or next(iter(node)) not in ("all", "any"):
            errors.append(PathError(at, 'a group is an object with one key, "all" or "any"'))
            return
        key, items = next(iter(node.items()))
        if depth > MAX_DEPTH:
            errors.append(PathError(at, f"groups nest at most {MAX_DEPTH} deep"))
            return
        if not isinstance(items, list):
            errors.append(PathError(f"{at}.{key}", "a group holds a list of conditions"))
            return
        for i, item in enumerate(items):
            where = f"{at}.{key}[{i}]"
            if isinstance(item, dict) and ("all" in item or "any" in item):
                group(item, where, depth + 1)
            elif counted(where):
                leaf(item, where)
            if nodes[0] > MAX_NODES:
                return

    def leaf(node: object, at: str) -> None:
        leaves[0] += 1
        if leaves[0] == MAX_LEAVES + 1:
            errors.append(PathError(at, f"a tree holds at most {MAX_LEAVES} conditions"))
        if not isinstance(node, dict):
            errors.append(PathError(at, 'a condition is an object {"fact", "op", "value"}'))
            return
        for extra in sorted(set(node) - {"fact", "op", "value"}):
            errors.append(PathError(f"{at}.{extra}", "unknown key (a condition has fact, op, value)"))
        if "fact" not in node:
            errors.append(PathError(f"{at}.fact", "missing"))
        elif parse_fact(node["fact"]) is None:
            errors.append(PathError(f"{at}.fact", f"unknown fact {node['fact']!r}: use field.<name>, "
                                    "form.<form>.<field>, hierarchy.<level>, subject.<"
                                    f"{'|'.join(SUBJECT_FACTS)}> or event.<key>"))
        op = node.get("op")
        if "op" not in node:
            errors.append(PathError(f"{at}.op", "missing"))
        elif op not in OPERATORS:
            errors.append(PathError(f"{at}.op", f"unknown operator {op!r}: use one of "
                                    f"{', '.join(OPERATORS)}"))
        else:
            assert isinstance(op, str)
            problem = _value_problem(op, "value" in node, node.get("value"))
            if problem:
                errors.append(PathError(f"{at}.value", problem))

    group(tree, path, 1)
    return errors


def facts_to_load(tree: object) -> WantedFacts:
    """The stored facts a tree needs: its facts of the three stored families, except those
    only looked at through the event's changes (changed, changed_to, changed_from)."""
    return WantedFacts.of({leaf["fact"] for leaf in _leaves(tree) if leaf["op"] not in CHANGE_OPS})


def _leaves(tree: object) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict) and len(node) == 1 and next(iter(node)) in ("all", "any"):
            for item in next(iter(node.values())) or []:
                walk(item)
        elif isinstance(node, dict) and isinstance(node.get("fact"), str):
            out.append(node)

    walk(tree)
    return out


# --- evaluation ----------------------------------------------------------------------


SEEN_MAX = 80  # characters of a text value kept in a stored trace


class LeafTrace(NamedTuple):
    """One condition as evaluated: what it expected, what it saw, and the outcome. One is
    made for every leaf of every rule evaluated, so a named tuple (made several times
    faster than a frozen dataclass), immutable all the same."""

    path: str
    fact: str
    op: str
    expected: object
    seen: object  # the value seen; None with missing=True when the fact was absent
    missing: bool
    result: bool
    reason: str = ""  # why it is false despite a value (type mismatch), or ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "fact": self.fact, "op": self.op,
                               "expected": self.expected, "result": self.result}
        if self.missing:
            out["missing"] = True
        else:
            out["seen"] = self.seen
        if self.reason:
            out["reason"] = self.reason
        return out

    def stored_json(self) -> dict[str, Any]:
        """The compact form stored on the event: the leaf's path, result and the value seen.
        Its fact, operator and expected value are in the rule version the trace names
        (versions are immutable); a long text value keeps its start and its length."""
        return stored_leaf(self)


def stored_leaf(t: LeafTrace) -> dict[str, Any]:
    """LeafTrace.stored_json (a function: one is made per leaf of every rule evaluated)."""
    path, _, _, _, seen, missing, result, reason = t
    if missing:
        out: dict[str, Any] = {"path": path, "result": result, "missing": True}
    elif type(seen) is str and len(seen) > SEEN_MAX:
        out = {"path": path, "result": result, "seen": seen[:SEEN_MAX] + "…", "seen_length": len(seen)}
    else:
        out = {"path": path, "result": result, "seen": seen}
    if reason:
        out["reason"] = reason
    return out


@dataclass(frozen=True)
class Facts:
    """What a tree is evaluated against: the subject's facts by name (absent: missing) and
    the event's changes {"<fact>": {"from": x, "to": y}}."""

    values: Mapping[str, object]
    changes: Mapping[str, object] = field(default_factory=dict)


_MISSING = object()


def stored(leaf: Mapping[str, Any]) -> bool:
    """Whether a leaf needs a stored fact (not the event's changes, not the subject row)."""
    fact = parse_fact(leaf["fact"])
    return leaf["op"] not in CHANGE_OPS and fact is not None and fact.family in STORED_FAMILIES


def prejudge(tree: Mapping[str, Any], facts: Facts) -> bool | None:
    """The tree's result from the facts at hand alone (the event's changes, the subject
    row, the event metadata), or None when it depends on stored facts not loaded yet
    (three-valued: an "all" with a false leaf is false whatever the others hold)."""
    return CompiledTree(tree).prejudge(facts)


NOT_LOADED = "not loaded: the facts at hand already decide the result"


def evaluate(tree: Mapping[str, Any], facts: Facts, path: str = "conditions",
             not_loaded: bool = False) -> tuple[bool, list[LeafTrace]]:
    """Whether a valid tree holds for the facts, and the trace of every leaf (all leaves
    are evaluated, so the trace shows everything an admin may ask about). With
    ``not_loaded``, stored facts were deliberately not loaded (prejudge decided): their
    leaves are traced as not loaded instead of missing."""
    return CompiledTree(tree, path).evaluate(facts, not_loaded)


class _Leaf(NamedTuple):
    path: str
    fact: str
    op: str
    expected: object
    stored: bool  # needs a stored fact (see ``stored``)
    change: bool  # looks at the event's changes, not at the facts


class _Group(NamedTuple):
    every: bool  # "all" (else "any")
    items: tuple[_Leaf | _Group, ...]


def _compile(node: Mapping[str, Any], at: str) -> _Group:
    key, items = next(iter(node.items()))
    out: list[_Leaf | _Group] = []
    for i, item in enumerate(items):
        where = f"{at}.{key}[{i}]"
        if "all" in item or "any" in item:
            out.append(_compile(item, where))
        else:
            out.append(_Leaf(where, item["fact"], item["op"], item.get("value"), stored(item),
                             item["op"] in CHANGE_OPS))
    return _Group(key == "all", tuple(out))


# A leaf's test of a value that is present: (result, reason), as _apply answers it.
Test = Callable[[object], tuple[bool, str]]
# A compiled node: given the facts, the changes, the trace to append to and whether stored
# facts were deliberately not loaded, its result (every leaf below it is evaluated).
_Node = Callable[[Mapping[str, object], Mapping[str, object], list["LeafTrace"], bool], bool]
# The same for prejudge: True, False or None (depends on stored facts not loaded).
_Judge = Callable[[Mapping[str, object], Mapping[str, object]], "bool | None"]

_TRUE: tuple[bool, str] = (True, "")
_FALSE: tuple[bool, str] = (False, "")
# Numbers are compared as they are: Python compares an int with a float exactly, where
# float() of a huge integer raised OverflowError (and rounded large integers).
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "less": operator.lt, "greater": operator.gt, "less_or_equal": operator.le,
    "greater_or_equal": operator.ge}


def _equality_test(expected: object) -> Callable[[object], bool] | None:
    """``_same(seen, expected)`` for a scalar expected value, without _same's general
    walk (None for a value it does not specialise)."""
    if isinstance(expected, bool):
        return lambda seen: type(seen) is bool and seen == expected
    if isinstance(expected, str):
        return lambda seen: type(seen) is str and seen == expected
    if expected is None:
        return lambda seen: seen is None
    if _is_number(expected):
        return lambda seen: type(seen) is not bool and isinstance(seen, _NUMBER) and seen == expected
    return None


def leaf_test(op: str, expected: object) -> Test:
    """The test of a present value for one operator and expected value, specialised once
    per leaf of a rule version; its answers are _apply's (tests/unit/test_conditions.py
    checks them against it for generated values)."""
    if op in ("not_equals", "not_in"):
        positive = leaf_test(op.removeprefix("not_"), expected)

        def negated(seen: object) -> tuple[bool, str]:
            result, reason = positive(seen)
            return (not result, reason)
        return negated
    if op == "equals":
        same = _equality_test(expected)
        if same is not None:
            return lambda seen: _TRUE if same(seen) else _FALSE
    if op == "in" and isinstance(expected, list) and expected and all(
            type(v) is str for v in expected):
        texts = frozenset(expected)
        return lambda seen: _TRUE if type(seen) is str and seen in texts else _FALSE
    if op in _COMPARE and _is_number(expected):
        compare, bound = _COMPARE[op], expected

        def ordered(seen: object) -> tuple[bool, str]:
            if type(seen) is bool or not isinstance(seen, _NUMBER):
                return _apply(op, seen, False, expected)  # the type mismatch, with its reason
            return _TRUE if compare(seen, bound) else _FALSE
        return ordered
    if op in DATE_OPS and _iso_date(expected) is not None:
        day_bound = _iso_date(expected)
        before = op == "before"

        def dated(seen: object) -> tuple[bool, str]:
            day = _iso_date(seen)
            if day is None or day_bound is None:
                return _apply(op, seen, False, expected)
            return _TRUE if (day < day_bound if before else day > day_bound) else _FALSE
        return dated
    if op == "contains" and isinstance(expected, str):
        def contains(seen: object) -> tuple[bool, str]:
            if type(seen) is str:
                return _TRUE if expected in seen else _FALSE
            return _apply(op, seen, False, expected)
        return contains
    if op in CHANGE_OPS and (op == "changed" or _equality_test(expected) is not None):
        side = "to" if op == "changed_to" else "from"
        is_wanted = None if op == "changed" else _equality_test(expected)

        def changed(seen: object) -> tuple[bool, str]:
            if type(seen) is not dict:
                return _apply(op, seen, False, expected)
            before, after = seen.get("from"), seen.get("to")
            if _same(before, after):
                return _UNCHANGED
            if is_wanted is None:
                return _TRUE
            return _TRUE if is_wanted(after if side == "to" else before) else _FALSE
        return changed
    return lambda seen: _apply(op, seen, False, expected)


_UNCHANGED = (False, "the value did not change")
_new_tuple = tuple.__new__


def _compile_leaf(n: _Leaf) -> tuple[_Node, _Judge]:
    path, fact, op, expected, is_stored, change = n
    test = leaf_test(op, expected)
    when_missing = _apply(op, None, True, expected)
    missing_trace = LeafTrace(path, fact, op, expected, None, True, *when_missing)
    not_loaded_trace = LeafTrace(path, fact, op, expected, None, True, False, NOT_LOADED)

    def run(values: Mapping[str, object], changes: Mapping[str, object],
            trace: list[LeafTrace], not_loaded: bool) -> bool:
        if not_loaded and is_stored:
            trace.append(not_loaded_trace)
            return False
        seen = (changes if change else values).get(fact, _MISSING)
        if seen is _MISSING:
            trace.append(missing_trace)
            return when_missing[0]
        result, reason = test(seen)
        # tuple.__new__ directly: the named tuple's own __new__ is one more Python call.
        trace.append(_new_tuple(LeafTrace, (path, fact, op, expected, seen, False, result, reason)))
        return result

    def judge(values: Mapping[str, object], changes: Mapping[str, object]) -> bool | None:
        if is_stored:
            return None
        seen = (changes if change else values).get(fact, _MISSING)
        return when_missing[0] if seen is _MISSING else test(seen)[0]

    return run, judge


def _compile_node(n: _Leaf | _Group) -> tuple[_Node, _Judge]:
    if type(n) is _Leaf:
        return _compile_leaf(n)
    assert isinstance(n, _Group)
    parts = [_compile_node(item) for item in n.items]
    runs = tuple(r for r, _ in parts)
    judges = tuple(j for _, j in parts)
    every = n.every

    # Every item is evaluated, even once the result is known: the trace shows all of them.
    def run_all(values: Mapping[str, object], changes: Mapping[str, object],
                trace: list[LeafTrace], not_loaded: bool) -> bool:
        held = True  # an empty "all" holds
        for item in runs:
            if not item(values, changes, trace, not_loaded):
                held = False
        return held

    def run_any(values: Mapping[str, object], changes: Mapping[str, object],
                trace: list[LeafTrace], not_loaded: bool) -> bool:
        held = False  # an empty "any" does not
        for item in runs:
            if item(values, changes, trace, not_loaded):
                held = True
        return held

    def judge(values: Mapping[str, object], changes: Mapping[str, object]) -> bool | None:
        results = [j(values, changes) for j in judges]
        if every:
            return False if False in results else None if None in results else True
        return True if True in results else None if None in results else False

    return (run_all if every else run_any), judge


class CompiledTree:
    """A valid condition tree compiled once into nested functions: paths, fact families,
    each leaf's test (specialised for its operator and expected value) and its trace when
    the fact is missing are worked out in advance, so a rule version's tree is compiled
    once (RuleDefinition) and evaluated for every event, with the same results and trace
    as walking the JSON each time. The functions are built from the closed operator set:
    nothing a tenant writes becomes code."""

    __slots__ = ("_judge", "_run", "root")

    def __init__(self, tree: Mapping[str, Any], path: str = "conditions") -> None:
        self.root = _compile(tree, path)
        self._run, self._judge = _compile_node(self.root)

    def evaluate(self, facts: Facts, not_loaded: bool = False) -> tuple[bool, list[LeafTrace]]:
        trace: list[LeafTrace] = []
        return self._run(facts.values, facts.changes, trace, not_loaded), trace

    def prejudge(self, facts: Facts) -> bool | None:
        return self._judge(facts.values, facts.changes)


def _same(a: object, b: object) -> bool:
    """JSON equality: a boolean is not a number, 1 equals 1.0, lists compare item by item."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _is_empty(v: object) -> bool:
    return v is None or (isinstance(v, str | list | dict) and len(v) == 0)


def _apply(op: str, seen: object, missing: bool, expected: object) -> tuple[bool, str]:
    if op == "empty":
        return missing or _is_empty(seen), ""
    if op == "not_empty":
        return not (missing or _is_empty(seen)), ""
    if op in ("not_equals", "not_in"):
        positive, reason = _apply(op.removeprefix("not_"), seen, missing, expected)
        return not positive, reason
    if missing:
        return False, ""
    if op == "equals":
        return _same(seen, expected), ""
    if op == "in":
        assert isinstance(expected, list)
        return any(_same(seen, v) for v in expected), ""
    if op in COMPARE_OPS:
        if not _is_number(seen):
            return False, f"type mismatch: {op} compares numbers, the fact holds {_kind(seen)}"
        return _COMPARE[op](seen, expected), ""
    if op in DATE_OPS:
        day, bound = _iso_date(seen), _iso_date(expected)
        if day is None or bound is None:
            return False, f"type mismatch: {op} compares dates YYYY-MM-DD, the fact holds {seen!r}"
        return (day < bound if op == "before" else day > bound), ""
    if op == "contains":
        if isinstance(seen, list):
            return any(_same(item, expected) for item in seen), ""
        if isinstance(seen, str):
            if not isinstance(expected, str):
                return False, "type mismatch: text contains only text"
            return expected in seen, ""
        return False, f"type mismatch: contains looks into a list or text, the fact holds {_kind(seen)}"
    if op in CHANGE_OPS:
        if not isinstance(seen, dict):
            return False, "the change is not a {from, to} record"
        before, after = seen.get("from"), seen.get("to")
        if _same(before, after):
            return False, "the value did not change"
        if op == "changed":
            return True, ""
        return _same(after if op == "changed_to" else before, expected), ""
    raise AssertionError(op)  # pragma: no cover - validated on save
