"""The rules store against real PostgreSQL: versions with who and what changed,
enable/disable, export/import (round trip, all or nothing) and phase 1 in SQL."""

from __future__ import annotations

from typing import Any

import pytest

from db.platform.tenancy import Tenant, TenantTx, tenant_tx
from db.rules.definitions import (
    candidate_indexes_of,
    create_rule,
    export_rules,
    get_rule,
    import_rules,
    list_rules,
    rule_versions,
    set_enabled,
    update_rule,
)
from domain.errors import Conflict, NotFound
from domain.rules.definitions import InvalidRule
from domain.rules.evaluation import Candidate
from tests.integration.rule_builders import (
    add_product,
    no_template_problems,
    rule_json,
    update_rule_json,
)

CHECK = no_template_problems


def create(tenant: Tenant, data: dict[str, Any], by: str = "ana") -> int:
    with tenant_tx(tenant.slug) as tx:
        return create_rule(tx, data, by, CHECK).id


def candidate_rules(tx: TenantTx, product: str, event_type: str, trigger_type: str | None) -> list[Candidate]:
    """Phase 1 (candidate_indexes_of) for one (product, event type, trigger type)."""
    key = (product, event_type, trigger_type)
    return list(candidate_indexes_of(tx, [key])[key].candidates)


def test_versions_record_who_and_what_changed(tenant: Tenant) -> None:
    add_product(tenant)
    rule_id = create(tenant, rule_json(), by="ana")
    changed = rule_json()
    changed["conditions"]["all"][0]["value"] = 5000000
    changed["filters"] = {"all": [{"fact": "hierarchy.region", "op": "equals", "value": "north"}]}
    with tenant_tx(tenant.slug) as tx:
        rule = update_rule(tx, rule_id, changed, "ben", CHECK)
        assert rule.version == 2 and rule.enabled
        same = update_rule(tx, rule_id, changed, "ben", CHECK)
        assert same.version == 2  # nothing changed: no new version
        assert set_enabled(tx, rule_id, False, "cara").version == 3
        assert set_enabled(tx, rule_id, False, "cara").version == 3
        assert set_enabled(tx, rule_id, True, "dan").enabled
        renamed = update_rule(tx, rule_id, {**changed, "name": "Huge case", "enabled": False}, "eve",
                              CHECK)
        versions = rule_versions(tx, rule_id)
    assert (renamed.version, renamed.name, renamed.enabled) == (5, "Huge case", False)
    assert [(v.version, v.changed_by, v.summary, v.enabled) for v in versions] == [
        (1, "ana", "created", True),
        (2, "ben", "changed conditions.all[0]; added filters.all[0]", True),
        (3, "cara", "disabled", False),
        (4, "dan", "enabled", True),
        (5, "eve", "name changed; disabled", False),
    ]
    assert versions[0].definition["conditions"]["all"][0]["value"] == 1000000
    assert versions[1].definition["conditions"]["all"][0]["value"] == 5000000


def test_the_product_vocabulary_and_unique_names_are_enforced(tenant: Tenant) -> None:
    add_product(tenant, trigger_types=("assigned", "form_submitted"))
    with tenant_tx(tenant.slug) as tx, pytest.raises(InvalidRule) as raised:
        create_rule(tx, update_rule_json("r", ["assigned", "teleported"],
                                         trigger={"types": ["assigned", "teleported"],
                                                  "subject_kind": "permit"}), "ana", CHECK)
    assert [e.path for e in raised.value.errors] == ["trigger.types[1]", "trigger.subject_kind"]
    with tenant_tx(tenant.slug) as tx, pytest.raises(InvalidRule) as raised:
        create_rule(tx, rule_json(product="whistle"), "ana", CHECK)
    assert [str(e) for e in raised.value.errors] == ["product: unknown product 'whistle'"]
    create(tenant, rule_json())
    with tenant_tx(tenant.slug) as tx, pytest.raises(Conflict):
        create_rule(tx, rule_json(), "ana", CHECK)
    with tenant_tx(tenant.slug) as tx, pytest.raises(NotFound):
        get_rule(tx, 999999)
    with tenant_tx(tenant.slug) as tx:
        assert [r.name for r in list_rules(tx)] == ["Large case created"]


def test_export_then_import_into_another_tenant_gives_the_same_rules(
        tenant: Tenant, make_tenant: Any) -> None:
    add_product(tenant)
    add_product(tenant, "whistle", subject_kinds=("incident",))
    create(tenant, rule_json())
    create(tenant, update_rule_json("Reassigned", ["assigned"], enabled=False))
    create(tenant, rule_json(product="whistle", name="Incident", trigger={}))
    with tenant_tx(tenant.slug) as tx:
        exported = export_rules(tx)
        fraud_only = export_rules(tx, "fraud")
    assert [(r["product"], r["name"], r["enabled"]) for r in exported] == [
        ("fraud", "Large case created", True), ("fraud", "Reassigned", False),
        ("whistle", "Incident", True)]
    assert len(fraud_only) == 2

    other = make_tenant()
    add_product(other)
    add_product(other, "whistle", subject_kinds=("incident",))
    with tenant_tx(other.slug) as tx:
        report = import_rules(tx, exported, "importer", CHECK)
        assert export_rules(tx) == exported
        again = import_rules(tx, exported, "importer", CHECK)
        assert [v.changed_by for r in list_rules(tx) for v in rule_versions(tx, r.id)] == ["importer"] * 3
    assert (len(report.created), report.updated, report.unchanged) == (3, [], [])
    assert (again.created, again.updated, len(again.unchanged)) == ([], [], 3)

    exported[0]["conditions"]["all"][0]["op"] = "greater_or_equal"
    with tenant_tx(other.slug) as tx:
        third = import_rules(tx, exported, "importer", CHECK)
        (updated,) = [r for r in list_rules(tx) if r.name == "Large case created"]
        summary = rule_versions(tx, updated.id)[-1].summary
    assert third.updated == ["fraud/Large case created"] and len(third.unchanged) == 2
    assert (updated.version, summary) == (2, "changed conditions.all[0]")


def test_an_import_with_any_bad_rule_saves_nothing_and_reports_every_error(tenant: Tenant) -> None:
    add_product(tenant)
    existing = create(tenant, rule_json())
    changed = rule_json()
    changed["conditions"]["all"][0]["value"] = 1
    batch = [
        changed,  # valid: would update the existing rule
        rule_json(name="New one"),  # valid: would create
        rule_json(name="Bad op", conditions={"all": [{"fact": "field.a", "op": "near", "value": 1}]}),
        rule_json(name="Bad product", product="nope"),
        rule_json(name="New one"),  # the same rule twice
        "not a rule",
    ]
    with tenant_tx(tenant.slug) as tx, pytest.raises(InvalidRule) as raised:
        import_rules(tx, batch, "importer", CHECK)
    assert [e.path for e in raised.value.errors] == [
        "[2].conditions.all[0].op", "[3].product", "[4].name", "[5]"]
    with tenant_tx(tenant.slug) as tx:
        rules = list_rules(tx)
        assert [(r.id, r.version) for r in rules] == [(existing, 1)]
        assert rules[0].definition.conditions["all"][0]["value"] == 1000000
        with pytest.raises(InvalidRule):
            import_rules(tx, {"rules": []}, "importer", CHECK)


def test_phase_one_selects_enabled_rules_of_the_product_kind_and_trigger_type(tenant: Tenant) -> None:
    add_product(tenant)
    add_product(tenant, "whistle", subject_kinds=("incident",))
    created = create(tenant, rule_json(name="created"))
    assigned = create(tenant, update_rule_json("assigned", ["assigned"]))
    both = create(tenant, update_rule_json("both", ["assigned", "status_changed"]))
    status = create(tenant, update_rule_json("status", ["status_changed"]))
    disabled = create(tenant, update_rule_json("disabled", ["assigned"], enabled=False))
    create(tenant, rule_json(product="whistle", name="other product", trigger={}))
    with tenant_tx(tenant.slug) as tx:
        assert [c.id for c in candidate_rules(tx, "fraud", "created", None)] == [created]
        assert [c.id for c in candidate_rules(tx, "fraud", "updated", "assigned")] == [assigned, both]
        assert [c.id for c in candidate_rules(tx, "fraud", "updated", "status_changed")] == [both, status]
        assert candidate_rules(tx, "fraud", "updated", "form_submitted") == []
        set_enabled(tx, disabled, True, "ana")
        changed = update_rule_json("assigned", ["assigned"],
                                   conditions={"all": [{"fact": "field.x", "op": "empty"}]})
        update_rule(tx, assigned, changed, "ana", CHECK)
        fresh = candidate_rules(tx, "fraud", "updated", "assigned")
    assert [(c.id, c.version) for c in fresh] == [(assigned, 2), (both, 1), (disabled, 2)]
    assert fresh[0].definition.conditions == {"all": [{"fact": "field.x", "op": "empty"}]}


def test_phase_one_for_a_batchs_keys_in_one_statement_matches_one_key_at_a_time(tenant: Tenant) -> None:
    add_product(tenant)
    create(tenant, rule_json(name="created"))
    create(tenant, update_rule_json("assigned", ["assigned"]))
    create(tenant, update_rule_json("both", ["assigned", "status_changed"]))
    keys = [("fraud", "updated", "assigned"), ("fraud", "created", None),
            ("fraud", "updated", "form_submitted"), ("fraud", "updated", "assigned")]
    with tenant_tx(tenant.slug) as tx:
        together = {k: list(index.candidates) for k, index in candidate_indexes_of(tx, keys).items()}
        apart = {k: candidate_rules(tx, *k) for k in keys}
    assert list(together) == list(dict.fromkeys(keys))
    assert {k: [(c.id, c.version) for c in v] for k, v in together.items()} == {
        k: [(c.id, c.version) for c in v] for k, v in apart.items()}
    assert len(together[("fraud", "updated", "assigned")]) == 2
    assert together[("fraud", "updated", "form_submitted")] == []


def test_phase_one_reuses_the_index_of_an_unchanged_rule_list_and_rebuilds_a_changed_one(
        tenant: Tenant) -> None:
    add_product(tenant)
    assigned = create(tenant, update_rule_json("assigned", ["assigned"]))
    both = create(tenant, update_rule_json("both", ["assigned", "status_changed"]))
    key = ("fraud", "updated", "assigned")
    with tenant_tx(tenant.slug) as tx:
        first = candidate_indexes_of(tx, [key])[key]
        again = candidate_indexes_of(tx, [key])[key]
        assert again is first  # the same (rule, version) list: the index built once
        changed = update_rule_json("assigned", ["assigned"],
                                   trigger={"types": ["assigned"], "metadata": {"role": "reviewer"}})
        update_rule(tx, assigned, changed, "ana", CHECK)
        after = candidate_indexes_of(tx, [key])[key]
    assert after is not first
    assert [(c.id, c.version) for c in after.candidates] == [(assigned, 2), (both, 1)]
    assert after.candidates[0].definition.trigger.metadata == {"role": "reviewer"}


def _revision(tenant: Tenant) -> str:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute("SELECT revision::text FROM rules_revision").fetchone()
    assert row is not None
    return str(row[0])


def test_every_change_to_the_rules_however_made_gives_them_a_new_revision(tenant: Tenant) -> None:
    """Phase 1's answers are kept under the revision (migration 0014's trigger): a rule
    created, edited, disabled, or changed by hand in SQL, each gives a revision never seen."""
    add_product(tenant, trigger_types=("assigned",))
    seen = [_revision(tenant)]
    rule_id = create(tenant, update_rule_json("assigned", ["assigned"]))
    seen.append(_revision(tenant))
    with tenant_tx(tenant.slug) as tx:
        update_rule(tx, rule_id, update_rule_json("renamed", ["assigned"]), "ana", CHECK)
    seen.append(_revision(tenant))
    with tenant_tx(tenant.slug) as tx:
        set_enabled(tx, rule_id, False, "ana")
    seen.append(_revision(tenant))
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE rules SET enabled = true")  # by hand, outside db/rules/definitions.py
    seen.append(_revision(tenant))
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("SELECT 1 FROM rules")  # reading changes nothing
    seen.append(_revision(tenant))
    assert len(set(seen)) == 5 and seen[-1] == seen[-2]


def test_phase_one_answers_kept_under_a_revision_are_never_used_after_a_change(tenant: Tenant) -> None:
    add_product(tenant, trigger_types=("assigned",))
    first_rule = create(tenant, update_rule_json("first", ["assigned"]))
    key = ("fraud", "updated", "assigned")
    before = _revision(tenant)
    with tenant_tx(tenant.slug) as tx:
        first = candidate_indexes_of(tx, [key], before)[key]
        assert candidate_indexes_of(tx, [key], before)[key] is first  # kept: no statement
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE rules SET enabled = false WHERE id = %s", [first_rule])
    after = _revision(tenant)
    with tenant_tx(tenant.slug) as tx:
        assert candidate_indexes_of(tx, [key], after)[key].candidates == []
        second_rule = create_rule(tx, update_rule_json("second", ["assigned"]), "ana", CHECK).id
    with tenant_tx(tenant.slug) as tx:
        latest = candidate_indexes_of(tx, [key], _revision(tenant))[key]
    assert [c.id for c in latest.candidates] == [second_rule]
