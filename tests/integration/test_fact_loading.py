"""Targeted loading against real PostgreSQL: at most one query per family asked for, none
for a family nobody asked for, exactly the asked keys back, a missing fact absent."""

from __future__ import annotations

from typing import Any

import pytest

from db.events.facts import (
    load_all_facts,
    load_all_facts_of_subjects,
    load_facts,
    load_facts_of_subjects,
    load_subject_facts,
)
from db.people.users import create_user
from db.platform.tenancy import Tenant, TenantTx, tenant_tx
from domain.people.identity import Role
from domain.rules.conditions import WantedFacts
from tests.integration.rule_builders import add_product, add_subject


class CountingConnection:
    """The transaction's own connection, counting the statements sent through it."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.statements: list[str] = []

    def execute(self, query: str, params: Any = None) -> Any:
        self.statements.append(query)
        return self.conn.execute(query, params)

    def pipeline(self) -> Any:
        return self.conn.pipeline()


@pytest.fixture
def subject(tenant: Tenant) -> int:
    add_product(tenant)
    return add_subject(
        tenant,
        fields={f"f{n}": n for n in range(20)} | {"label": "urgent", "tags": ["a", "b"]},
        forms={"intake": {f"q{n}": f"answer {n}" for n in range(10)}, "exit": {"q1": "no"}},
        hierarchy={"region": "north", "department": "fin", "team": "t1"},
    )


def counted(tx: TenantTx) -> tuple[TenantTx, CountingConnection]:
    counter = CountingConnection(tx.conn)
    return TenantTx(counter, tx.tenant), counter  # type: ignore[arg-type]


@pytest.mark.parametrize(("wanted", "families"), [
    (WantedFacts(fields=frozenset({"f1", "label", "nope"})), ["subject_fields"]),
    (WantedFacts(forms=frozenset({("intake", "q2"), ("exit", "q1"), ("exit", "q2")})),
     ["subject_form_answers"]),
    (WantedFacts(levels=frozenset({"region", "country"})), ["subject_hierarchy"]),
    (WantedFacts(frozenset({"tags"}), frozenset({("intake", "q9")}), frozenset({"team"})),
     ["subject_fields", "subject_form_answers", "subject_hierarchy"]),
    (WantedFacts(), []),
])
def test_one_query_per_family_asked_and_none_for_the_others(
        tenant: Tenant, subject: int, wanted: WantedFacts, families: list[str]) -> None:
    with tenant_tx(tenant.slug) as tx:
        counting_tx, counter = counted(tx)
        facts = load_facts(counting_tx, subject, wanted)
        everything = load_all_facts(tx, subject)
    assert [next(t for t in ("subject_fields", "subject_form_answers", "subject_hierarchy")
                 if t in q) for q in counter.statements] == families
    # Exactly the asked facts the subject has, with the values loading everything gives.
    assert set(facts) == wanted.names() & set(everything)
    assert facts == {name: everything[name] for name in facts}


def test_the_asked_values_are_the_stored_ones_and_missing_facts_are_absent(
        tenant: Tenant, subject: int) -> None:
    wanted = WantedFacts(frozenset({"f3", "tags", "absent"}),
                         frozenset({("intake", "q1"), ("exit", "q1"), ("intake", "nope")}),
                         frozenset({"region", "division"}))
    with tenant_tx(tenant.slug) as tx:
        facts = load_facts(tx, subject, wanted)
    assert facts == {"field.f3": 3, "field.tags": ["a", "b"], "form.intake.q1": "answer 1",
                     "form.exit.q1": "no", "hierarchy.region": "north"}


def test_loading_everything_returns_every_family(tenant: Tenant, subject: int) -> None:
    with tenant_tx(tenant.slug) as tx:
        counting_tx, counter = counted(tx)
        facts = load_all_facts(counting_tx, subject)
    assert len(counter.statements) == 3
    assert len(facts) == 22 + 11 + 3
    assert facts["hierarchy.team"] == "t1" and facts["form.exit.q1"] == "no"


def test_another_subjects_facts_are_never_loaded(tenant: Tenant, subject: int) -> None:
    other = add_subject(tenant, external_id="C-2", fields={"f1": "other"},
                        forms={"intake": {"q1": "other"}}, hierarchy={"region": "south"})
    wanted = WantedFacts(frozenset({"f1"}), frozenset({("intake", "q1")}), frozenset({"region"}))
    with tenant_tx(tenant.slug) as tx:
        assert load_facts(tx, other, wanted) == {"field.f1": "other", "form.intake.q1": "other",
                                                 "hierarchy.region": "south"}
        assert load_facts(tx, subject, wanted)["hierarchy.region"] == "north"


def test_the_subject_row_facts_include_sorted_assignees(tenant: Tenant) -> None:
    add_product(tenant)
    with tenant_tx(tenant.slug) as tx:
        ids = [create_user(tx, email, Role.MEMBER, "correct-horse-battery").id
               for email in ("zoe@example.com", "ana@example.com")]
    subject = add_subject(tenant, external_id="C-9", assignees=tuple(ids))
    with tenant_tx(tenant.slug) as tx:
        facts = load_subject_facts(tx, subject)
        assert load_subject_facts(tx, subject + 1000) == {}
    assert facts == {"subject.kind": "case", "subject.status": "open", "subject.title": "Subject C-9",
                     "subject.external_id": "C-9",
                     "subject.assignees": ["ana@example.com", "zoe@example.com"]}


def test_a_batch_of_subjects_is_loaded_in_one_query_per_family_asked(tenant: Tenant, subject: int) -> None:
    other = add_subject(tenant, external_id="C-2", fields={"f1": "other", "f2": 2},
                        forms={"intake": {"q1": "other"}}, hierarchy={"region": "south"})
    wanted = {
        subject: WantedFacts(frozenset({"f1", "label", "nope"}), frozenset({("exit", "q1")})),
        other: WantedFacts(frozenset({"f2"}), frozenset({("intake", "q1"), ("intake", "q9")})),
    }
    with tenant_tx(tenant.slug) as tx:
        counting_tx, counter = counted(tx)
        facts = load_facts_of_subjects(counting_tx, wanted)
        one_by_one = {s: load_facts(tx, s, w) for s, w in wanted.items()}
    # Two families asked (no hierarchy), whatever the number of subjects.
    assert len(counter.statements) == 2
    assert "subject_fields" in counter.statements[0] and "subject_form_answers" in counter.statements[1]
    assert facts == one_by_one
    assert facts[other] == {"field.f2": 2, "form.intake.q1": "other"}
    assert facts[subject] == {"field.f1": 1, "field.label": "urgent", "form.exit.q1": "no"}


def test_a_batch_asking_nothing_queries_nothing_and_everything_matches_one_by_one(
        tenant: Tenant, subject: int) -> None:
    other = add_subject(tenant, external_id="C-3", fields={"f1": "x"}, hierarchy={"region": "south"})
    with tenant_tx(tenant.slug) as tx:
        counting_tx, counter = counted(tx)
        assert load_facts_of_subjects(counting_tx, {subject: WantedFacts()}) == {subject: {}}
        assert counter.statements == []
        everything = load_all_facts_of_subjects(tx, [subject, other])
        assert everything == {subject: load_all_facts(tx, subject), other: load_all_facts(tx, other)}
