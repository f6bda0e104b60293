"""Rule conditions compiled to SQL, for the clock's scan of time rules (db/rules/time_rules.py).

A condition tree (domain/rules/conditions.py) becomes a boolean SQL expression over the subject
row aliased ``s``, with the same meaning as domain.rules.conditions.evaluate, so the scan can
choose its candidates in the claiming statement instead of loading every subject's facts.
What cannot be said in SQL with certainty (subject.assignees, an operator on a fact family
whose JSON semantics differ) compiles to TRUE and the compiled result says it is inexact:
the SQL is then a necessary condition only, and the scan evaluates the whole tree in Python
(with targeted loading) on the candidates it chose.

The missing-fact rules are those of domain/rules/conditions.py: a positive comparison of a
missing fact is false, not_equals/not_in are the negation of their positive operator,
empty is true for an absent, null, "", [] or {} value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from psycopg.types.json import Jsonb

from domain.rules.conditions import parse_fact

__all__ = ["CompiledConditions", "compile_conditions"]

_SUBJECT_COLUMNS = {"status": "s.status", "title": "s.title", "kind": "s.kind",
                    "external_id": "s.external_id"}
_EMPTY_JSON = "('null'::jsonb, '\"\"'::jsonb, '[]'::jsonb, '{}'::jsonb)"
_COMPARE = {"less": "<", "greater": ">", "less_or_equal": "<=", "greater_or_equal": ">="}


@dataclass
class CompiledConditions:
    sql: str  # a boolean expression over the subjects row ``s``
    params: dict[str, Any] = field(default_factory=dict)
    exact: bool = True  # False: sql is only a necessary condition; evaluate the tree too


def compile_conditions(trees: list[Mapping[str, Any]], prefix: str = "c") -> CompiledConditions:
    """The conjunction of these trees (a time rule's conditions and filters) as SQL."""
    out = CompiledConditions("TRUE")
    parts = []
    for tree in trees:
        sql, exact = _node(tree, out, prefix)
        parts.append(sql)
        out.exact = out.exact and exact
    out.sql = " AND ".join(f"({p})" for p in parts) if parts else "TRUE"
    return out


def _param(out: CompiledConditions, prefix: str, value: object) -> str:
    name = f"{prefix}{len(out.params)}"
    out.params[name] = value
    return f"%({name})s"


def _node(node: Mapping[str, Any], out: CompiledConditions, prefix: str) -> tuple[str, bool]:
    if "all" in node or "any" in node:
        key, items = next(iter(node.items()))
        compiled = [_node(item, out, prefix) for item in items]
        if key == "all":
            if not compiled:
                return "TRUE", True
            kept = [sql for sql, _ in compiled if sql != "TRUE"] or ["TRUE"]
            return " AND ".join(f"({sql})" for sql in kept), all(e for _, e in compiled)
        if not compiled:
            return "FALSE", True
        if not all(e for _, e in compiled):
            return "TRUE", False  # one inexact alternative: any subject may hold
        return " OR ".join(f"({sql})" for sql, _ in compiled), True
    sql = _leaf(node, out, prefix)
    return (sql, True) if sql is not None else ("TRUE", False)


def _leaf(leaf: Mapping[str, Any], out: CompiledConditions, prefix: str) -> str | None:
    fact = parse_fact(leaf["fact"])
    op, value = leaf["op"], leaf.get("value")
    if fact is None:
        return None
    if op.startswith("not_") and op != "not_empty":
        positive = _leaf({**leaf, "op": op.removeprefix("not_")}, out, prefix)
        return None if positive is None else f"NOT ({positive})"
    if fact.family == "subject":
        column = _SUBJECT_COLUMNS.get(fact.key[0])
        return None if column is None else _text(column, op, value, out, prefix)
    if fact.family == "hierarchy":
        exists = ("EXISTS (SELECT 1 FROM subject_hierarchy h JOIN hierarchy_units u ON u.id = h.unit_id "
                  f"WHERE h.subject_id = s.id AND h.level = {_param(out, prefix, fact.key[0])}")
        if op == "empty":
            return f"NOT {exists} AND u.code <> '')"
        if op == "not_empty":
            return f"{exists} AND u.code <> '')"
        test = _text("u.code", op, value, out, prefix)
        return None if test is None else f"{exists} AND {test})"
    if fact.family in ("field", "form"):
        if fact.family == "field":
            exists = ("EXISTS (SELECT 1 FROM subject_fields f WHERE f.subject_id = s.id "
                      f"AND f.name = {_param(out, prefix, fact.key[0])}")
        else:
            exists = ("EXISTS (SELECT 1 FROM subject_form_answers f WHERE f.subject_id = s.id "
                      f"AND f.form = {_param(out, prefix, fact.key[0])} "
                      f"AND f.field = {_param(out, prefix, fact.key[1])}")
        if op == "empty":
            return f"NOT {exists} AND f.value NOT IN {_EMPTY_JSON})"
        if op == "not_empty":
            return f"{exists} AND f.value NOT IN {_EMPTY_JSON})"
        test = _json("f.value", op, value, out, prefix)
        return None if test is None else f"{exists} AND {test})"
    return None  # event.* never reaches a time rule (validated on save)


def _text(column: str, op: str, value: object, out: CompiledConditions, prefix: str) -> str | None:
    """A positive operator on a text value that is present (never NULL)."""
    if op == "equals":
        return f"{column} = {_param(out, prefix, value)}::text" if isinstance(value, str) else "FALSE"
    if op == "in":
        texts = [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
        return f"{column} = ANY({_param(out, prefix, texts)}::text[])" if texts else "FALSE"
    if op == "contains":
        return f"strpos({column}, {_param(out, prefix, value)}::text) > 0" if isinstance(value, str) \
            else "FALSE"
    if op == "empty":
        return f"{column} = ''"
    if op == "not_empty":
        return f"{column} <> ''"
    if op in _COMPARE:
        return "FALSE"  # text is never a number: a type mismatch is false
    if op in ("before", "after"):
        sign = "<" if op == "before" else ">"
        return f"coalesce(iso_date_or_null({column}) {sign} {_param(out, prefix, value)}::date, false)"
    return None


def _json(column: str, op: str, value: object, out: CompiledConditions, prefix: str) -> str | None:
    """A positive operator on a stored JSON value that is present."""
    if op == "equals":
        return f"{column} = {_param(out, prefix, Jsonb(value))}"
    if op == "in":
        values = value if isinstance(value, list) else []
        return f"{column} = ANY({_param(out, prefix, [Jsonb(v) for v in values])}::jsonb[])"
    if op in _COMPARE:
        # CASE, not AND: SQL does not promise to test the type before casting
        return (f"CASE WHEN jsonb_typeof({column}) = 'number' THEN "
                f"({column})::numeric {_COMPARE[op]} {_param(out, prefix, value)}::numeric ELSE false END")
    if op in ("before", "after"):
        sign = "<" if op == "before" else ">"
        return (f"(jsonb_typeof({column}) = 'string' AND coalesce(iso_date_or_null({column} #>> '{{}}') "
                f"{sign} {_param(out, prefix, value)}::date, false))")
    if op == "contains":
        text = (f"strpos({column} #>> '{{}}', {_param(out, prefix, value)}::text) > 0"
                if isinstance(value, str) else "false")
        return (f"CASE jsonb_typeof({column}) "
                f"WHEN 'array' THEN EXISTS (SELECT 1 FROM jsonb_array_elements({column}) e(item) "
                f"WHERE e.item = {_param(out, prefix, Jsonb(value))}) "
                f"WHEN 'string' THEN {text} ELSE false END")
    return None
