"""Conditions compiled to SQL for the scan (db/rules/condition_sql.py) mean what
domain/rules/conditions.py evaluate means: for every operator, on present, missing, null, empty
and wrongly typed values, SQL and Python choose the same subjects."""

from __future__ import annotations

from typing import Any

import pytest

from db.events.facts import load_facts_of_subjects, load_subject_facts
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.condition_sql import compile_conditions
from domain.rules.conditions import Facts, WantedFacts, evaluate
from tests.integration.rule_builders import add_subject
from tests.integration.time_rule_support import add_metrology

VALUES: list[Any] = [5, 5.0, 12, -1, "5", "abc", "", None, True, False, [], [5, "x"], {}, {"a": 1},
                     "2027-06-01", "2027-02-30", "2026-12-31"]

LEAVES: list[dict[str, Any]] = [
    *({"fact": f, "op": op, "value": v} for f in ("field.x", "form.f.q")
      for op in ("equals", "not_equals") for v in (5, "5", None, True, "abc", "")),
    *({"fact": "field.x", "op": op, "value": v} for op in ("in", "not_in")
      for v in ([5, "abc"], [None], [True, 12])),
    *({"fact": "field.x", "op": op, "value": 5} for op in ("less", "greater", "less_or_equal",
                                                           "greater_or_equal")),
    *({"fact": "field.x", "op": op, "value": "2027-01-01"} for op in ("before", "after")),
    *({"fact": "field.x", "op": op, "value": v} for op in ("contains",) for v in (5, "b", "x")),
    *({"fact": f, "op": op} for f in ("field.x", "form.f.q", "hierarchy.region", "subject.title")
      for op in ("empty", "not_empty")),
    *({"fact": "hierarchy.region", "op": op, "value": v} for op in ("equals", "not_equals", "in", "contains")
      for v in ("north", ["north", "south"], "or", 5) if (op in ("in",)) == isinstance(v, list)),
    *({"fact": "subject.status", "op": op, "value": v} for op in ("equals", "not_equals", "contains")
      for v in ("open", "closed", 5, "pe")),
    {"fact": "subject.status", "op": "in", "value": ["open", 1]},
    {"fact": "subject.title", "op": "greater", "value": 1},
]


@pytest.fixture
def subjects(tenant: Tenant) -> list[int]:
    add_metrology(tenant)
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("INSERT INTO products (code, name, subject_kinds) VALUES ('fraud', 'F', '{case}')")
    ids = [add_subject(tenant, external_id="none")]
    for n, value in enumerate(VALUES):
        ids.append(add_subject(tenant, external_id=f"s{n}", fields={"x": value},
                               forms={"f": {"q": value}},
                               hierarchy={"region": "north" if n % 2 else "south"}))
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE subjects SET status = 'closed' WHERE external_id LIKE 's1%%'")
    return ids


def _python(tenant: Tenant, ids: list[int], tree: dict[str, Any]) -> set[int]:
    with tenant_tx(tenant.slug) as tx:
        wanted = WantedFacts(frozenset({"x"}), frozenset({("f", "q")}), frozenset({"region"}))
        stored = load_facts_of_subjects(tx, {i: wanted for i in ids})
        return {i for i in ids
                if evaluate(tree, Facts({**load_subject_facts(tx, i), **stored[i]}))[0]}


def _sql(tenant: Tenant, tree: dict[str, Any]) -> set[int]:
    compiled = compile_conditions([tree])
    assert compiled.exact
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute(f"SELECT s.id FROM subjects s WHERE {compiled.sql}", compiled.params)
        return {int(str(r[0])) for r in rows}


def test_every_leaf_chooses_the_same_subjects_in_sql_and_in_python(tenant: Tenant,
                                                                   subjects: list[int]) -> None:
    for leaf in LEAVES:
        tree = {"all": [leaf]}
        assert _sql(tenant, tree) == _python(tenant, subjects, tree), leaf


def test_groups_combine_the_same_way(tenant: Tenant, subjects: list[int]) -> None:
    trees: list[dict[str, Any]] = [
        {"all": []}, {"any": []},
        {"any": [{"fact": "field.x", "op": "equals", "value": 5},
                 {"all": [{"fact": "subject.status", "op": "equals", "value": "closed"},
                          {"fact": "hierarchy.region", "op": "equals", "value": "north"}]}]},
        {"all": [{"fact": "field.x", "op": "not_empty"},
                 {"any": [{"fact": "form.f.q", "op": "greater", "value": 0},
                          {"fact": "form.f.q", "op": "contains", "value": "x"}]}]},
    ]
    for tree in trees:
        assert _sql(tenant, tree) == _python(tenant, subjects, tree), tree


def test_what_sql_cannot_say_is_left_to_python() -> None:
    assignees = {"fact": "subject.assignees", "op": "contains", "value": "a@example.com"}
    status = {"fact": "subject.status", "op": "equals", "value": "open"}
    assert not compile_conditions([{"all": [assignees, status]}]).exact
    inexact = compile_conditions([{"all": [assignees, status]}])
    assert "s.status" in inexact.sql  # what SQL can say still narrows the candidates
    assert compile_conditions([{"any": [assignees, status]}]).sql == "(TRUE)"
    assert compile_conditions([{"all": [status]}, {"all": []}]).exact
