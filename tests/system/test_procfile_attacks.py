"""A tenant admin attacking the processes every tenant shares, under the Procfile's
processes (web, worker, clock) and judged from outside: the range literal that built ten
million items in the web process (preview) and in the worker (every notice, retried), and
an amount no double holds beside an innocent event. The preview and the save are refused
over HTTP, a rule saved before the limits sends its notices with the default text, the
huge amount is refused at intake; the same web and worker processes keep serving, and the
other tenant's events are notified throughout."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import httpx
from psycopg.types.json import Jsonb

from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from tests.integration.conftest import wait_until
from tests.integration.portal_support import PASSWORD, csrf_token, sign_in
from tests.integration.test_portal_rules import builder_form, post_form, text_of
from tests.support.procfile_stack import ProcfileStack
from tests.system.outcomes import RECOVERY_LIMIT
from tests.system.test_procfile_events import EVENT_SETTINGS, _alerts, _case, _desk, _rule, _scalar, _send

RANGE_ATTACK = "{% for i in (1..5) %}{% assign n = (1..10000000) | join: '' | size %}{% endfor %}{{ n }}"
ADMIN = "admin@attacker.example"


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _legacy_rule(tenant: Tenant, name: str, body: str) -> None:
    """A rule saved before the template limits existed (written as the rules store wrote it)."""
    rule = {**_rule(name), "actions": {**_rule(name)["actions"],
                                       "template": {"title": "Case {{ subject.external_id }}", "body": body}}}
    rule["conditions"] = {"all": []}
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute("INSERT INTO rules (product, name, kind, definition) "
                              "VALUES ('fraud', %s, 'created', %s) RETURNING id",
                              [name, Jsonb(rule)]).fetchone()
        assert row is not None
        tx.conn.execute("INSERT INTO rule_versions (rule_id, version, definition, enabled, changed_by) "
                        "VALUES (%s, 1, %s, true, 'before the limits')", [row[0], Jsonb(rule)])


def _bodies(tenant: Tenant) -> list[str]:
    with tenant_tx(tenant.slug) as tx:
        return [str(r[0]) for r in tx.conn.execute("SELECT body FROM notifications ORDER BY id").fetchall()]


def _pids(stack: ProcfileStack) -> dict[str, list[int]]:
    return {name: sorted(stack.line(name).pids()) for name in ("web", "worker")}


def test_template_and_number_attacks_are_refused_while_every_process_and_tenant_carries_on(
        make_tenant: Callable[..., Tenant], procfile: Callable[..., ProcfileStack]) -> None:
    attacker, victim = make_tenant(), make_tenant()
    attacker_key, victim_key = _desk(attacker), _desk(victim)
    with tenant_tx(attacker.slug) as tx:
        create_user(tx, ADMIN, Role.ADMIN, PASSWORD)
    _legacy_rule(attacker, "Saved before the limits", RANGE_ATTACK)
    stack = procfile(**EVENT_SETTINGS).start_all()
    wait_until(lambda: _ready(stack.portal_url), "the portal to serve", RECOVERY_LIMIT)
    before = _pids(stack)
    assert before["web"] and before["worker"]

    with httpx.Client(base_url=stack.portal_url, timeout=RECOVERY_LIMIT) as http:
        assert sign_in(http, attacker.slug, ADMIN).status_code == 303
        token = csrf_token(http.get("/rules/new?product=fraud").text)
        preview = post_form(http, "/rules/preview", builder_form(token, body=RANGE_ATTACK),
                            headers={"HX-Request": "true"})
        assert preview.status_code == 200
        assert "The body template is refused: range limit reached" in text_of(preview.text)
        saved = post_form(http, "/rules/create", builder_form(token, name="Attack", body=RANGE_ATTACK))
        assert saved.status_code == 422 and "range limit reached" in text_of(saved.text)
        assert _scalar(attacker, "SELECT count(*) FROM rules WHERE name = 'Attack'") == 0

        # The attacker's own host: an innocent event, and one whose amount no double holds.
        innocent = _case(1)
        huge = json.dumps(_case(2)).replace('"amount": 1002', '"amount": 1' + "0" * 400)
        headers = {"Authorization": f"Bearer {attacker_key}", "content-type": "application/json"}
        refused = http.post("/api/v1/events/batch", headers=headers,
                            content=f'{{"events": [{json.dumps(innocent)}, {huge}]}}')
        assert refused.status_code == 422, refused.text
        assert [p["path"] for p in refused.json()["problems"]] == ["events[1].subject.fields.amount"]
        assert http.post("/api/v1/events", headers=headers, content=huge).status_code == 422
        assert http.post("/api/v1/events", headers=headers, json=innocent).status_code == 201

        # The other tenant's events, sent while all this goes on, are notified.
        _send(stack, victim_key, [_case(n) for n in range(20)])
        wait_until(lambda: _alerts(victim) == 20, "the other tenant's notices", RECOVERY_LIMIT)
        # The attacker's innocent event: its Large case notice, and the old rule's notice
        # with the default text (the rule's own template is refused for it, not retried).
        wait_until(lambda: len(_bodies(attacker)) == 2, "the attacker's two notices", RECOVERY_LIMIT)
        bodies = _bodies(attacker)
        assert any(b.startswith('The rule "Saved before the limits" fired for case C-1') for b in bodies)
        assert "Amount 1001" in bodies
        attention = http.get("/ledger/attention")
        assert attention.status_code == 200
        section = attention.text.split('id="defaulted-title"')[1].split("</section>")[0]
        assert "Saved before the limits" in section and "range limit reached" in section

    assert _ready(stack.portal_url)
    assert _pids(stack) == before  # the same processes: none died, none was restarted
    log: Any = stack.output("worker")
    assert "Traceback" not in stack.output("web") and "MemoryError" not in log
