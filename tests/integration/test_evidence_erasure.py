"""Erasing a person: their address and name are gone from every table of the tenant, and
the evidence chain still verifies (it holds salted digests and ids, never the values)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql

from db.evidence.audit import record_audit
from db.evidence.chain import seal_tenant
from db.evidence.verify import verify_tenant
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import create_rule
from domain.audit import Actor
from tests.integration.builders import add_client
from tests.integration.intake_support import fraud_desk
from tests.integration.test_cli import run
from tests.integration.test_relay import BIG_CASE_RULE

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)


def _occurrences(tenant: Tenant, *values: str) -> list[str]:
    """Every (table.column) of the tenant's schema whose text holds one of ``values``."""
    found = []
    with tenant_tx(tenant.slug) as tx:
        columns = tx.conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND data_type IN ('text', 'jsonb', 'character varying')", [tenant.schema]).fetchall()
        for table, column in columns:
            for value in values:
                hit = tx.conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE {}::text ILIKE %s").format(
                    sql.Identifier(str(table)), sql.Identifier(str(column))), [f"%{value}%"]).fetchone()
                if hit and hit[0]:
                    found.append(f"{table}.{column}")
    return found


def test_an_erased_persons_address_and_name_are_gone_and_the_chain_still_verifies(
        tenant: Tenant, capsys: pytest.CaptureFixture[str]) -> None:
    email, name = "dana.whistle@client.example", "Dana Whistleblower"
    _client, people = add_client(tenant, AS_OF.date() + timedelta(days=7), name="Erasure Ltd", users=1)
    fraud_desk(tenant)
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE users SET email = %s, display_name = %s WHERE id = %s",
                        [email, name, people[0].id])
        claim_due_milestones(tx, AS_OF)
        prepare_claims(tx)
        create_rule(tx, BIG_CASE_RULE, by=email)  # the rule's version names who saved it
        tx.conn.execute("UPDATE delivery_attempts SET error = %s", [f"mailbox {email} is full"])
        tx.conn.execute("INSERT INTO delivery_attempts (delivery_id, attempt_no, claim_token, error) "
                        "SELECT id, 9, gen_random_uuid(), %s FROM notification_deliveries LIMIT 1",
                        [f"550 {email.upper()} unknown ({name})"])
        tx.conn.execute("INSERT INTO suppressed_addresses (email, reason) VALUES (%s, 'bounce')", [email])
    seal_tenant(tenant.slug)
    assert verify_tenant(tenant.slug).ok
    assert _occurrences(tenant, email, name)  # the person is there before

    code, out, _err = run(capsys, "evidence", "erase-person", "--tenant", tenant.slug, "--email", email)
    assert code == 0, out

    assert _occurrences(tenant, email, name) == []
    seal_tenant(tenant.slug)
    report = verify_tenant(tenant.slug)
    assert report.ok, [b.describe() for b in report.breaks]


def test_an_erased_person_leaves_the_audit_log_too_which_still_refuses_every_other_change(
        tenant: Tenant, capsys: pytest.CaptureFixture[str]) -> None:
    """The audit log is append-only, yet names people: who signed in, whom an admin invited.
    The erasure rewrites those rows (the one change its trigger allows, in the erasure's own
    transaction) and records itself by the user's id."""
    email = "sam.signer@client.example"
    _client, [person] = add_client(tenant, AS_OF.date() + timedelta(days=7), name="Audit Ltd", users=1)
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE users SET email = %s WHERE id = %s", [email, person.id])
        record_audit(tx, "member.invite", "user", person.id, after={"email": email})
        record_audit(tx, "sign_in", "session", person.id, actor=Actor.user(person.id, email, "192.0.2.7"))
    assert "audit_log.actor_label" in _occurrences(tenant, email)
    seal_tenant(tenant.slug)  # the rows naming them are chained (kind 'audit')
    assert verify_tenant(tenant.slug).ok

    code, out, _err = run(capsys, "evidence", "erase-person", "--tenant", tenant.slug, "--email", email)

    assert code == 0, out
    assert _occurrences(tenant, email) == []
    seal_tenant(tenant.slug)
    report = verify_tenant(tenant.slug)
    assert report.ok, [b.describe() for b in report.breaks]
    with tenant_tx(tenant.slug) as tx:  # the invitation's after JSON lost its salt with the person
        salted = tx.conn.execute(
            "SELECT a.action FROM audit_log a JOIN evidence_salts s ON s.person = 'audit_log:' || a.id "
            "ORDER BY a.id").fetchall()
    assert "member.invite" not in [r[0] for r in salted]
    assert {"sign_in", "person.erase"} <= {r[0] for r in salted}
    with tenant_tx(tenant.slug) as tx:
        [(action, object_id)] = tx.conn.execute(
            "SELECT action, object_id FROM audit_log WHERE action = 'person.erase'").fetchall()
    assert (action, object_id) == ("person.erase", str(person.id))
    with pytest.raises(psycopg.errors.InsufficientPrivilege), tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE audit_log SET actor_label = 'someone else'")
