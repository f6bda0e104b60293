"""The evidence page's export form: the same use case as `tocsin evidence export`, over HTTP.
The ZIP it downloads verifies with its own bundled verifier; a bad range is refused with a
message beside the form; another organisation's client or rule is not found."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import httpx

from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import create_rule
from domain.people.identity import Role
from tests.integration.builders import scalar
from tests.integration.intake_support import fraud_desk
from tests.integration.portal_support import PASSWORD, People, PortalClient, csrf_token, sign_in, signed_in
from tests.integration.rule_builders import rule_json
from tocsin.core import runtime
from tocsin.core.evidence_signing import checkpoint_signer

VERIFY_LIMIT = 120  # seconds for the bundled verifier to check a small pack


def _export(portal: PortalClient, token: str, **fields: str) -> httpx.Response:
    return portal.post("/ledger/chain/export", data={"_csrf_token": token, **fields},
                       follow_redirects=False)


def test_the_form_downloads_a_pack_that_its_bundled_verifier_accepts(
        portal: PortalClient, people: People, tmp_path: Path) -> None:
    token = csrf_token(signed_in(portal, people, people.admin))
    page = portal.get("/ledger/chain").text
    assert "Export an evidence pack" in page and 'action="/ledger/chain/export"' in page
    answer = portal.post("/ledger/chain/export", data={
        "_csrf_token": token, "client": str(people.client.id), "rule": "licence"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/zip"
    assert answer.headers["content-disposition"].startswith('attachment; filename="tocsin-evidence-')

    pack = tmp_path / "pack.zip"
    pack.write_bytes(answer.content)
    with zipfile.ZipFile(io.BytesIO(answer.content)) as z:
        (tmp_path / "verify_pack.py").write_bytes(z.read("verify_pack.py"))
        checkpoint = json.loads(z.read("checkpoint.json"))
        manifest = json.loads(z.read("manifest.json"))
    assert manifest["selection"] == f"client {people.client.id}, rule licence"
    assert len(manifest["rows"]["notification_ledger"]) == scalar(  # that client's claims only
        people.tenant, "SELECT count(*) FROM notification_ledger WHERE subject_kind = 'client' "
        "AND subject_id = %s", people.client.id) > 0
    public_key = checkpoint_signer(runtime.settings()).public_key_hex
    verified = subprocess.run([sys.executable, "verify_pack.py", "pack.zip", "--public-key", public_key],
                              cwd=tmp_path, capture_output=True, text=True, timeout=VERIFY_LIMIT)
    assert verified.returncode == 0 and "The pack verifies." in verified.stdout, verified.stdout

    # The pack's checkpoint is a fresh one, kept with the others, and the export is audited.
    assert scalar(people.tenant, "SELECT count(*) FROM evidence_checkpoints WHERE reason = 'export' "
                  "AND seq = %s AND head_hash = %s", checkpoint["seq"], checkpoint["head_hash"]) == 1
    assert scalar(people.tenant, "SELECT actor_label FROM audit_log WHERE action = 'export.evidence_pack'") \
        == people.admin.email


def test_a_range_that_ends_before_it_starts_or_a_malformed_date_is_refused_beside_the_form(
        portal: PortalClient, people: People) -> None:
    token = csrf_token(signed_in(portal, people, people.admin))
    backwards = _export(portal, token, claimed_from="2027-03-10", claimed_to="2027-03-01")
    assert backwards.status_code == 400
    assert "the range ends (2027-03-01) before it starts (2027-03-10)" in backwards.text
    assert 'value="2027-03-10"' in backwards.text  # what was typed stays
    malformed = _export(portal, token, claimed_from="10/03/2027")
    assert malformed.status_code == 400 and "use YYYY-MM-DD" in malformed.text
    empty = _export(portal, token, claimed_from="2001-01-01", claimed_to="2001-01-31")
    assert empty.status_code == 400 and "the pack would be empty" in empty.text
    assert scalar(people.tenant, "SELECT count(*) FROM evidence_checkpoints") == 0


def test_another_organisations_client_or_rule_is_not_found_and_members_cannot_export(
        portal: PortalClient, people: People, make_tenant: Callable[..., Tenant]) -> None:
    fraud_desk(people.tenant)
    with tenant_tx(people.tenant.slug) as tx:
        our_rule = create_rule(tx, rule_json(name="Ours"), "admin@tenant.example")
    other = make_tenant()  # no client, no rule: every id of ours is another organisation's there
    with tenant_tx(other.slug) as tx:
        create_user(tx, "admin@other.example", Role.ADMIN, PASSWORD)
    assert sign_in(portal, other.slug, "admin@other.example").status_code == 303
    their_token = csrf_token(portal.get("/").text)
    assert _export(portal, their_token, client=str(people.client.id)).status_code == 404
    assert _export(portal, their_token, rule=f"rule:{our_rule.id}").status_code == 404
    assert _export(portal, their_token, rule="rule:x").status_code == 404

    portal.cookies.clear()
    member_token = csrf_token(signed_in(portal, people, people.client_user))
    assert _export(portal, member_token).status_code == 404


def test_the_settings_page_saves_the_compliance_address_and_retention_and_refuses_bad_values(
        portal: PortalClient, people: People) -> None:
    token = csrf_token(signed_in(portal, people, people.admin))
    page = portal.get("/settings").text
    assert 'action="/settings/evidence"' in page and "Compliance address" in page
    saved = portal.post("/settings/evidence", follow_redirects=False, data={
        "_csrf_token": token, "compliance_email": "DPO@Tenant.example", "retention_days": "365"})
    assert saved.status_code == 303
    page = portal.get("/settings?done=evidence").text
    assert 'value="dpo@tenant.example"' in page and 'value="365"' in page and "Saved." in page
    for fields, said in (({"compliance_email": "nobody"}, "invalid email address"),
                         ({"retention_days": "0"}, "between 1 and 36,500 days"),
                         ({"retention_days": "a year"}, "a number of days")):
        refused = portal.post("/settings/evidence", data={"_csrf_token": token, **fields})
        assert refused.status_code == 400 and said in refused.text, refused.text
    assert scalar(people.tenant, "SELECT compliance_email || ' ' || retention_days FROM evidence_settings") \
        == "dpo@tenant.example 365"
    portal.cookies.clear()
    member_token = csrf_token(signed_in(portal, people, people.client_user))
    assert portal.post("/settings/evidence", data={"_csrf_token": member_token, "retention_days": "1"},
                       follow_redirects=False).status_code in (403, 404)
