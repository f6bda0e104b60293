"""`tocsin rules ...`: create, list, show, update, enable/disable, export and import through
the command, and bad input refused with one line and nothing written."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import list_rules, rule_versions
from tests.integration.rule_builders import add_product, rule_json, update_rule_json
from tests.integration.test_cli import run


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def versions(tenant: Tenant) -> list[tuple[str, int, str, str]]:
    with tenant_tx(tenant.slug) as tx:
        return [(r.name, v.version, v.changed_by, v.summary)
                for r in list_rules(tx) for v in rule_versions(tx, r.id)]


def test_create_list_show_update_enable_disable(
        tenant: Tenant, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_product(tenant)
    t = tenant.slug
    code, out, err = run(capsys, "rules", "create", "--tenant", t, write(tmp_path, "r.json", rule_json()))
    assert code == 0, err
    assert out.startswith("created rule ") and "(fraud/Large case created), version 1" in out
    rule_id = out.split()[2]

    code, out, _ = run(capsys, "rules", "list", "--tenant", t)
    assert code == 0
    assert "Large case created" in out and "created" in out and "yes" in out

    changed = rule_json()
    changed["conditions"]["all"][0]["value"] = 2000000
    code, out, _ = run(capsys, "rules", "update", "--tenant", t, "--by", "ana", rule_id,
                       write(tmp_path, "r2.json", changed))
    assert (code, out.strip()) == (0, f"updated rule {rule_id} to version 2: changed conditions.all[0]")
    code, out, _ = run(capsys, "rules", "update", "--tenant", t, rule_id,
                       write(tmp_path, "r3.json", changed))
    assert (code, out.strip()) == (0, f"rule {rule_id} unchanged (version 2)")
    code, out, _ = run(capsys, "rules", "disable", "--tenant", t, rule_id)
    assert (code, out.strip()) == (0, f"rule {rule_id} disabled (version 3)")
    code, out, _ = run(capsys, "rules", "enable", "--tenant", t, "--by", "ben", rule_id)
    assert (code, out.strip()) == (0, f"rule {rule_id} enabled (version 4)")

    code, out, _ = run(capsys, "rules", "show", "--tenant", t, rule_id)
    assert code == 0 and "version 4, enabled" in out and '"value": 2000000' in out
    assert versions(tenant) == [
        ("Large case created", 1, "cli", "created"),
        ("Large case created", 2, "ana", "changed conditions.all[0]"),
        ("Large case created", 3, "cli", "disabled"),
        ("Large case created", 4, "ben", "enabled"),
    ]


def test_export_to_stdout_and_import_into_another_tenant(
        tenant: Tenant, make_tenant: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    add_product(tenant)
    for name, data in (("a", rule_json()), ("b", update_rule_json("Reassigned", ["assigned"]))):
        assert run(capsys, "rules", "create", "--tenant", tenant.slug,
                   write(tmp_path, f"{name}.json", data))[0] == 0
    code, exported, _ = run(capsys, "rules", "export", "--tenant", tenant.slug, "--product", "fraud")
    assert code == 0 and len(json.loads(exported)) == 2

    other = make_tenant()
    add_product(other)
    monkeypatch.setattr(sys, "stdin", io.StringIO(exported))
    code, out, err = run(capsys, "rules", "import", "--tenant", other.slug, "-")
    assert (code, out.strip()) == (0, "imported 2 rule(s): created 2, updated 0, unchanged 0"), err
    code, again, _ = run(capsys, "rules", "export", "--tenant", other.slug)
    assert json.loads(again) == json.loads(exported)


def test_bad_input_is_one_line_and_writes_nothing(
        tenant: Tenant, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_product(tenant)
    t = tenant.slug
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    invalid = rule_json(kind="weekly", conditions={"all": [{"fact": "field.a", "op": "near"}]})
    batch = [rule_json(), rule_json(name="x", product="nope")]
    cases = [
        (("rules", "create", "--tenant", t, str(bad_json)), "bad.json is not JSON"),
        (("rules", "create", "--tenant", t, str(tmp_path / "absent.json")), "cannot read"),
        (("rules", "create", "--tenant", t, write(tmp_path, "i.json", invalid)),
         "invalid rule (2 errors): kind: 'weekly' is not a rule kind"),
        (("rules", "import", "--tenant", t, write(tmp_path, "batch.json", batch)),
         "[1].product: unknown product 'nope'"),
        (("rules", "show", "--tenant", t, "424242"), "no rule 424242"),
        (("rules", "enable", "--tenant", t, "424242"), "no rule 424242"),
        (("rules", "list", "--tenant", t, "--product", "Bad Code"), "invalid product code"),
    ]
    for argv, fragment in cases:
        code, out, err = run(capsys, *argv)
        assert code == 2, (argv, out, err)
        assert err.count("\n") == 1 and err.startswith("tocsin: error: "), err
        assert fragment in err, err
    assert versions(tenant) == []
