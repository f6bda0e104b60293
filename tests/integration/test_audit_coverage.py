"""Every state-changing route of the portal and every state-changing `tocsin` command
records an audit row. The routes are read from the app's own route table and the commands
from the CLI's own parser, so a route or command added later without an exercise here (or a
stated reason why it changes nothing a person decided) fails this test; each exercise runs
the real thing and must add a row whose action it names."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyotp
import pytest
from litestar import Litestar

from db.delivery.recovery import HELD_REASON
from db.delivery.webhook_deliveries import queue_test_event
from db.delivery.webhook_endpoints import create_endpoint, disable_endpoint, enable_endpoint
from db.events.api_keys import create_api_key
from db.people.two_factor import confirm_enrolment, start_enrolment
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.delivery.unsubscribe import unsubscribe_token
from domain.people.identity import Role
from portal.auth import PUBLIC
from tests.integration.builders import scalar
from tests.integration.conftest import remove_tenant
from tests.integration.intake_support import case_event, fraud_desk
from tests.integration.portal_support import PASSWORD, People, PortalClient, csrf_token, sign_in
from tests.integration.rule_builders import rule_json
from tests.integration.sign_in_support import use_provider
from tests.integration.test_cli import run
from tests.integration.test_portal_rules import builder_form, post_form
from tests.support.oidc_provider import LocalIdentityProvider
from tocsin.boot.web import build_app
from tocsin.core.clock import pinned
from tocsin.core.keys import signing_keys
from tocsin.core.settings import load_settings
from tocsin.shell.cli import build_parser

STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}

# Routes that change state but record no audit row, each with the reason.
NOT_AUDITED = {
    "POST /notifications/{notification_id:int}/{action:str}":
        "a person's own reading state; an acknowledgement is evidence in the ledger "
        "(acknowledged_at and acknowledged_by)",
    "POST /inbox/read-all": "a person's own reading state",
    "POST /hooks/ses": "Amazon reporting a delivery outcome (authenticated by the SNS signature), "
                       "no person or key acting; every event is kept in provider_events",
    "POST /rules/builder/refresh": "re-renders the rule builder's form; writes nothing",
    "POST /rules/preview": "renders a template preview; writes nothing",
    "POST /settings/brand/preview": "renders the branding page's email preview; writes nothing",
    "POST /settings/email-templates/{kind:str}/{locale:str}/preview":
        "renders the template editor's preview; keeps the editing admin's own draft for the "
        "preview frames, which nobody else ever receives",
    "POST /login/sso": "only sends the browser to its organisation's sign-in page (the single "
                       "sign-on's way back records the sign-in or its refusal)",
}


@dataclass
class World:
    portal: PortalClient
    people: People
    member_id: int
    rule_id: int
    key: str

    @property
    def tenant(self) -> Tenant:
        return self.people.tenant

    def as_user(self, email: str) -> str:
        """Sign in (afresh) as ``email``; a CSRF token of the signed-in session."""
        self.portal.cookies.clear()
        assert sign_in(self.portal, self.tenant.slug, email).status_code == 303
        return csrf_token(self.portal.get("/").text)

    def as_admin(self) -> str:
        return self.as_user(self.people.admin.email)

    def post(self, path: str, token: str, **data: str) -> int:
        return self.portal.post(path, data={"_csrf_token": token, **data},
                                follow_redirects=False).status_code


def _stop_texts(world: World) -> int:
    token = world.as_admin()
    world.post("/preferences/texts/phone", token, phone="+44 7400 123456")
    return world.post("/preferences/texts/stop", token, sms="on")


def hold_a_delivery(world: World) -> int:
    """The client user's d7 reminder, held for review as the sweep leaves it under hold."""
    delivery_id = int(scalar(world.tenant,
                             "SELECT d.id FROM notification_deliveries d JOIN notifications n "
                             "ON n.id = d.notification_id WHERE n.recipient_user_id = %s",
                             world.people.client_user.id))
    with tenant_tx(world.tenant.slug) as tx:
        tx.conn.execute("UPDATE notification_deliveries SET status = 'sending' WHERE id = %s",
                        [delivery_id])
        tx.conn.execute("UPDATE notification_deliveries SET status = 'unknown', status_reason = %s, "
                        "unknown_since = now() WHERE id = %s", [HELD_REASON, delivery_id])
    return delivery_id


def _invite_and_join(w: World) -> None:
    token = w.as_admin()
    assert w.post("/members/invite", token, email="joiner@tenant.example", role="member") == 303
    href = scalar(w.tenant, "SELECT n.data ->> 'href' FROM notifications n JOIN users u ON "
                  "u.id = n.recipient_user_id WHERE u.email = 'joiner@tenant.example'")
    w.portal.cookies.clear()
    token = csrf_token(w.portal.get("/login").text)
    assert w.post(f"{href}/join", token, password=PASSWORD, confirm=PASSWORD) == 303


IMPORT_FILES = {"/clients/import": b"external_id,name,expires_on\r\nA-1,Acme,2031-01-01\r\n",
                "/subjects/import": b"kind,external_id,title\r\npermit,P-1,Permit\r\n"}


def _upload(w: World, base: str = "/clients/import") -> str:
    answer = w.portal.post(base, data={"_csrf_token": w.as_admin()},
                           files={"file": ("c.csv", IMPORT_FILES[base], "text/csv")}, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    return str(answer.headers["location"])


def _import_run(w: World, base: str = "/clients/import") -> None:
    from tests.integration.conftest import wait_until

    report = _upload(w, base)
    assert w.post(f"{report}/run", w.as_admin(), mode="all") == 303
    wait_until(lambda: scalar(w.tenant, "SELECT stage FROM imports ORDER BY id DESC LIMIT 1") == "done",
               "the import")


def _interrupted_import(w: World, base: str, action: str) -> None:
    """An import claimed by a process that died (its lease expired), resumed or restarted."""
    from datetime import timedelta

    from db.platform.imports import LEASE, start_import
    from tests.integration.conftest import wait_until
    from tocsin.core.clock import pinned, utcnow

    report = _upload(w, base)
    import_id = int(report.rsplit("/", 1)[1])
    with tenant_tx(w.tenant.slug) as tx:
        start_import(tx, import_id, base.split("/")[1], "all")
    with pinned(utcnow() + LEASE + timedelta(seconds=1)):
        assert w.post(f"{report}/{action}", w.as_admin()) == 303
        wait_until(lambda: scalar(w.tenant, "SELECT stage FROM imports WHERE id = %s", import_id)
                   in ("done", "validated"), "the import")


def _manual_subject(w: World) -> int:
    from db.events.manual_subjects import create_manual_subject
    from domain.events.manual import ManualSubject

    with tenant_tx(w.tenant.slug) as tx:
        return create_manual_subject(tx, ManualSubject("permit", "P-9", "Permit")).subject_id


def _version(w: World) -> str:
    return str(scalar(w.tenant, "SELECT version FROM clients WHERE id = %s", w.people.client.id))


def _unsubscribe(w: World) -> None:
    keys = signing_keys(load_settings())
    link = unsubscribe_token(keys.unsubscribe.current, w.tenant.slug, w.people.admin.id,
                             "license_expiring", datetime.now(UTC))
    assert w.portal.post(f"/unsubscribe/{link}").status_code == 200


def _import_rules(w: World) -> None:
    token = w.as_admin()
    body = json.dumps([rule_json(name="Imported rule")])
    answer = w.portal.post("/rules/import", data={"_csrf_token": token},
                           files={"file": ("rules.json", body.encode(), "application/json")})
    assert answer.status_code == 200, answer.text


def _events(w: World, path: str, payload: object) -> None:
    answer = w.portal.post(path, json=payload, headers={"Authorization": f"Bearer {w.key}"})
    assert answer.status_code == 201, answer.text


def _webhook(w: World) -> int:
    with tenant_tx(w.tenant.slug) as tx:
        return create_endpoint(tx, "https://hooks.example.com/in", ["webhook.test"],
                               allow_private=False).id


def _slack_on(w: World) -> str:
    """Slack turned on for the tenant (the chat choices offer only enabled channels)."""
    token = w.as_admin()
    assert w.post("/channels/slack", token, enabled="on") == 303
    return token


def _redeliver_webhook(w: World) -> int:
    """A test event cancelled by a disabling, the endpoint enabled again, then redelivered."""
    endpoint_id = _webhook(w)
    with tenant_tx(w.tenant.slug) as tx:
        delivery_id = queue_test_event(tx, endpoint_id, "admin@tenant.example")
        disable_endpoint(tx, endpoint_id, "paused for the test")
        enable_endpoint(tx, endpoint_id)
    return w.post(f"/webhooks/{endpoint_id}/deliveries/{delivery_id}/redeliver", w.as_admin())


SVG_LOGO = (b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
            b'<rect width="10" height="10" fill="#1d4ed8"/></svg>')


TEMPLATE = "/settings/email-templates/licence_reminder/en"
TEMPLATE_FORM = {"subject": "{{ client.name }}: renew", "preheader": "{{ default.preheader }}",
                 "body": "{{ default.body }}"}


def _restore_template(w: World) -> int:
    token = w.as_admin()
    assert w.post(TEMPLATE, token, **TEMPLATE_FORM) == 303
    assert w.post(TEMPLATE, token, **{**TEMPLATE_FORM, "subject": "Renew"}) == 303
    return w.post(f"{TEMPLATE}/versions/1/restore", token)
def _with_provider(w: World, change: Callable[[LocalIdentityProvider, str], int]) -> int:
    provider = LocalIdentityProvider()
    try:
        return change(provider, w.as_admin())
    finally:
        provider.close()


def _save_provider(w: World) -> int:
    return _with_provider(w, lambda idp, token: w.post(
        "/settings/sign-in/provider", token, issuer=idp.issuer, client_id=idp.client_id,
        client_secret=idp.client_secret, allowed_domains="tenant.example"))


def _password_off(w: World) -> int:
    def change(idp: LocalIdentityProvider, token: str) -> int:
        use_provider(w.tenant, idp)
        return w.post("/settings/sign-in/password", token, password_enabled="off")
    return _with_provider(w, change)


def _enrolled_admin(w: World, when: datetime) -> str:
    """Two-factor on for the admin (confirmed at ``when``): its secret."""
    with tenant_tx(w.tenant.slug) as tx, pinned(when):
        secret = start_enrolment(tx, w.people.admin.id).secret
        confirm_enrolment(tx, w.people.admin.id, pyotp.TOTP(secret).at(when))
    return secret


def _two_factor_step(w: World) -> int:
    now = int(datetime.now(UTC).timestamp())
    when = datetime.fromtimestamp(now - now % 30, UTC)
    secret = _enrolled_admin(w, when)
    later = when + timedelta(seconds=30)
    w.portal.cookies.clear()
    with pinned(later):
        sign_in(w.portal, w.tenant.slug, w.people.admin.email)
        token = csrf_token(w.portal.get("/login/two-factor").text)
        return w.post("/login/two-factor", token, code=pyotp.TOTP(secret).at(later))


def _two_factor_confirm(w: World) -> int:
    token = w.as_admin()
    w.post("/account/two-factor/start", token)
    with tenant_tx(w.tenant.slug) as tx:
        secret = str(tx.conn.execute("SELECT totp_secret FROM users WHERE id = %s",
                                     [w.people.admin.id]).fetchone()[0])  # type: ignore[index]
    return w.post("/account/two-factor/confirm", token, code=pyotp.TOTP(secret).now())


def _two_factor_disable(w: World) -> int:
    now = int(datetime.now(UTC).timestamp())
    when = datetime.fromtimestamp(now - now % 30, UTC) - timedelta(seconds=60)
    token = w.as_admin()
    secret = _enrolled_admin(w, when)
    return w.post("/account/two-factor/disable", token, code=pyotp.TOTP(secret).now())


def _upload_logo(w: World) -> int:
    token = w.as_admin()
    return w.portal.post("/settings/brand/logo", data={"_csrf_token": token},
                         files={"logo": ("logo.svg", SVG_LOGO, "image/svg+xml")},
                         follow_redirects=False).status_code


# Each state-changing route: how to exercise it, and the action prefix its audit row has.
Exercise = Callable[[World], object]
ROUTES: dict[str, tuple[Exercise, str]] = {
    "POST /login": (lambda w: w.as_admin(), "sign_in"),
    "POST /logout": (lambda w: w.post("/logout", w.as_admin()), "sign_out"),
    "POST /renew": (lambda w: w.post("/renew", w.as_user(w.people.client_user.email),
                                     expires_on=w.people.client.access_expires_on.isoformat()),
                    "licence.renewed"),
    "POST /clients/{client_id:int}/renew": (
        lambda w: w.post(f"/clients/{w.people.other_client.id}/renew", w.as_admin(),
                         expires_on=w.people.other_client.access_expires_on.isoformat()),
        "licence.renewed"),
    "POST /members/invite": (lambda w: w.post("/members/invite", w.as_admin(),
                                              email="invited@tenant.example", role="member"),
                             "member.invite"),
    "POST /members/{user_id:int}/role": (
        lambda w: w.post(f"/members/{w.member_id}/role", w.as_admin(), role="admin"), "member.role"),
    "POST /members/{user_id:int}/deactivate": (
        lambda w: w.post(f"/members/{w.member_id}/deactivate", w.as_admin()), "member.deactivate"),
    "POST /invitations/{token:str}/join": (_invite_and_join, "member.join"),
    "POST /ledger/attention/deliveries/{delivery_id:int}/send-again": (
        lambda w: w.post(f"/ledger/attention/deliveries/{hold_a_delivery(w)}/send-again", w.as_admin()),
        "delivery.send_again"),
    "POST /ledger/attention/deliveries/{delivery_id:int}/mark-delivered": (
        lambda w: w.post(f"/ledger/attention/deliveries/{hold_a_delivery(w)}/mark-delivered",
                         w.as_admin()),
        "delivery.mark_delivered"),
    "POST /ledger/chain/export": (
        lambda w: w.post("/ledger/chain/export", w.as_admin(), client=str(w.people.client.id)),
        "export.evidence_pack"),
    "POST /settings/evidence": (
        lambda w: w.post("/settings/evidence", w.as_admin(), compliance_email="dpo@tenant.example",
                         retention_days="365"), "settings.evidence"),
    "POST /settings/unknown-outcome": (
        lambda w: w.post("/settings/unknown-outcome", w.as_admin(), policy="hold"),
        "settings.unknown_outcome"),
    "POST /preferences/categories/{category:str}": (
        lambda w: w.post("/preferences/categories/report_ready", w.as_admin(), in_app="on",
                         frequency="daily_digest"),
        "preference.save"),
    "POST /preferences/schedule": (
        lambda w: w.post("/preferences/schedule", w.as_admin(), digest_time="07:30", weekly_day="2",
                         time_zone="Europe/Paris"),
        "preference.schedule"),
    "POST /preferences/defaults/{category:str}": (
        lambda w: w.post("/preferences/defaults/report_ready", w.as_admin(), in_app="on",
                         email="on", frequency="instant"),
        "settings.category_default"),
    "GET, POST /unsubscribe/{token:str}": (_unsubscribe, "preference.save"),
    "POST /channels/{channel:str}": (
        lambda w: w.post("/channels/slack", w.as_admin(), enabled="on",
                         webhook_url="https://hooks.slack.com/services/T0/B0/x"), "chat_channel.save"),
    "POST /preferences/chat/{channel:str}": (
        lambda w: w.post("/preferences/chat/slack", _slack_on(w),
                         webhook_url="https://hooks.slack.com/services/T0/B0/own"),
        "preference.chat_address"),
    "POST /preferences/categories/{category:str}/chat": (
        lambda w: w.post("/preferences/categories/case_alert/chat", _slack_on(w)), "preference.chat"),
    "POST /preferences/defaults/{category:str}/chat": (
        lambda w: w.post("/preferences/defaults/case_alert/chat", _slack_on(w), slack="on"),
        "settings.chat_default"),
    "POST /api-keys/new": (lambda w: w.post("/api-keys/new", w.as_admin(), label="Case system"),
                           "api_key.create"),
    "POST /api-keys/{key_id:int}/revoke": (
        lambda w: w.post(f"/api-keys/{create_api_key(w.tenant.slug, 'old')[0].id}/revoke", w.as_admin()),
        "api_key.revoke"),
    "POST /rules/{rule_id:int}/disable": (
        lambda w: w.post(f"/rules/{w.rule_id}/disable", w.as_admin()), "rule.disabled"),
    "POST /rules/{rule_id:int}/enable": (
        lambda w: (w.post(f"/rules/{w.rule_id}/disable", w.as_admin()),
                   w.post(f"/rules/{w.rule_id}/enable", w.as_admin())), "rule.enabled"),
    "POST /rules/{rule_id:int}/duplicate": (
        lambda w: w.post(f"/rules/{w.rule_id}/duplicate", w.as_admin()), "rule.created"),
    "POST /rules/import": (_import_rules, "rule.created"),
    "POST /rules/create": (
        lambda w: post_form(w.portal, "/rules/create", builder_form(w.as_admin(), name="Built")),
        "rule.created"),
    "POST /rules/{rule_id:int}/save": (
        lambda w: post_form(w.portal, f"/rules/{w.rule_id}/save",
                            builder_form(w.as_admin(), name="Renamed rule")), "rule.edited"),
    "POST /clients/new": (
        lambda w: w.post("/clients/new", w.as_admin(), name="Acme", expires_on="2031-03-01",
                         plan="standard"), "client.create"),
    "POST /clients/{client_id:int}/details": (
        lambda w: w.post(f"/clients/{w.people.client.id}/details", w.as_admin(), name="Renamed Ltd",
                         plan="enterprise", version=_version(w)), "client.edit"),
    "POST /clients/{client_id:int}/expiry": (
        lambda w: w.post(f"/clients/{w.people.client.id}/expiry", w.as_admin(), expires_on="2031-01-31",
                         reason="two-year contract", version=_version(w)), "licence.corrected"),
    "POST /clients/{client_id:int}/archive": (
        lambda w: w.post(f"/clients/{w.people.client.id}/archive", w.as_admin(), version=_version(w)),
        "client.archive"),
    "POST /clients/{client_id:int}/restore": (
        lambda w: (w.post(f"/clients/{w.people.client.id}/archive", w.as_admin(), version=_version(w)),
                   w.post(f"/clients/{w.people.client.id}/restore", w.as_admin(), version=_version(w))),
        "client.restore"),
    "POST /clients/{client_id:int}/users/invite": (
        lambda w: w.post(f"/clients/{w.people.client.id}/users/invite", w.as_admin(),
                         email="new@northwind.example"), "member.invite"),
    "POST /clients/{client_id:int}/users/{user_id:int}/deactivate": (
        lambda w: w.post(f"/clients/{w.people.client.id}/users/{w.people.client_user.id}/deactivate",
                         w.as_admin()), "member.deactivate"),
    "POST /webhooks/new": (
        lambda w: w.post("/webhooks/new", w.as_admin(), url="https://hooks.example.com/new",
                         notice_created="on"), "webhook.create"),
    "POST /webhooks/{endpoint_id:int}/test": (
        lambda w: w.post(f"/webhooks/{_webhook(w)}/test", w.as_admin()), "webhook.test"),
    "POST /webhooks/{endpoint_id:int}/rotate": (
        lambda w: w.post(f"/webhooks/{_webhook(w)}/rotate", w.as_admin()), "webhook.rotate_secret"),
    "POST /webhooks/{endpoint_id:int}/disable": (
        lambda w: w.post(f"/webhooks/{_webhook(w)}/disable", w.as_admin()), "webhook.disable"),
    "POST /webhooks/{endpoint_id:int}/enable": (
        lambda w: w.post(f"/webhooks/{(e := _webhook(w))}/disable", w.as_admin())
        and w.post(f"/webhooks/{e}/enable", w.as_admin()), "webhook.enable"),
    "POST /webhooks/{endpoint_id:int}/deliveries/{delivery_id:int}/redeliver": (
        _redeliver_webhook, "webhook.redeliver"),
    "POST /subjects/new": (lambda w: w.post("/subjects/new", w.as_admin(), kind="permit",
                                            external_id="P-1", due_on="2031-01-01"), "subject.create"),
    "POST /subjects/{subject_id:int}/edit": (
        lambda w: w.post(f"/subjects/{_manual_subject(w)}/edit", w.as_admin(), kind="permit",
                         external_id="P-9", title="Renewed permit"), "subject.edit"),
    "POST /subjects/{subject_id:int}/close": (
        lambda w: w.post(f"/subjects/{_manual_subject(w)}/close", w.as_admin()), "subject.close"),
    "POST /clients/import": (lambda w: _upload(w), "client_import.upload"),
    "POST /clients/import/{import_id:int}/run": (_import_run, "client.import"),
    "POST /clients/import/{import_id:int}/resume": (
        lambda w: _interrupted_import(w, "/clients/import", "resume"), "import.resume"),
    "POST /clients/import/{import_id:int}/restart": (
        lambda w: _interrupted_import(w, "/clients/import", "restart"), "import.restart"),
    "POST /subjects/import": (lambda w: _upload(w, "/subjects/import"), "subject_import.upload"),
    "POST /subjects/import/{import_id:int}/run": (
        lambda w: _import_run(w, "/subjects/import"), "subject.import"),
    "POST /subjects/import/{import_id:int}/resume": (
        lambda w: _interrupted_import(w, "/subjects/import", "resume"), "import.resume"),
    "POST /subjects/import/{import_id:int}/restart": (
        lambda w: _interrupted_import(w, "/subjects/import", "restart"), "import.restart"),
    "POST /settings/brand": (
        lambda w: w.post("/settings/brand", w.as_admin(), display_name="Acme Compliance",
                         colour="#1d4ed8", footer="1 Main Street, Springfield"), "settings.brand"),
    "POST /settings/brand/logo": (_upload_logo, "settings.brand_logo"),
    "POST /settings/email-templates/{kind:str}/{locale:str}": (
        lambda w: w.post(TEMPLATE, w.as_admin(), **TEMPLATE_FORM), "email_template.save"),
    "POST /settings/email-templates/{kind:str}/{locale:str}/test": (
        lambda w: w.post(f"{TEMPLATE}/test", w.as_admin(), **TEMPLATE_FORM), "email_template.test"),
    "POST /settings/email-templates/{kind:str}/{locale:str}/versions/{version:int}/restore": (
        _restore_template, "email_template.restore"),
    "POST /preferences/language": (
        lambda w: w.post("/preferences/language", w.as_admin(), locale="de"), "preference.language"),
    "POST /preferences/texts/phone": (
        lambda w: w.post("/preferences/texts/phone", w.as_admin(), phone="+44 7400 123456"), "sms.phone"),
    "POST /preferences/texts/category": (
        lambda w: w.post("/preferences/texts/category", w.as_admin(), category="report_ready", sms="on"),
        "sms.category"),
    "POST /preferences/texts/stop": (_stop_texts, "sms.stop"),
    "POST /channels/sms/cap": (
        lambda w: w.post("/channels/sms/cap", w.as_admin(), cap="20"), "sms.spend_cap"),
    "POST /channels/email-failover": (
        lambda w: w.post("/channels/email-failover", w.as_admin(), on_5xx="on", run_of_5xx="3",
                         throttled_minutes="15"), "email_failover.save"),
    "POST /settings/sign-in/provider": (_save_provider, "settings.single_sign_on"),
    "POST /settings/sign-in/password": (_password_off, "settings.password_sign_in"),
    "POST /settings/sign-in/two-factor": (
        lambda w: w.post("/settings/sign-in/two-factor", w.as_admin(), required="on"),
        "settings.two_factor_for_admins"),
    "POST /login/two-factor": (_two_factor_step, "sign_in"),
    "POST /account/two-factor/start": (
        lambda w: w.post("/account/two-factor/start", w.as_admin()), "two_factor.start"),
    "POST /account/two-factor/confirm": (_two_factor_confirm, "two_factor.enable"),
    "POST /account/two-factor/disable": (_two_factor_disable, "two_factor.disable"),
    "POST /api/v1/events": (lambda w: _events(w, "/api/v1/events", case_event()), "events.record"),
    "POST /api/v1/events/batch": (
        lambda w: _events(w, "/api/v1/events/batch", {"events": [case_event("C-1"), case_event("C-2")]}),
        "events.record"),
}

# Downloads of the tenant's data (GET, yet each one is recorded).
EXPORTS: dict[str, tuple[Exercise, str]] = {
    "GET /ledger.csv": (lambda w: (w.as_admin(), w.portal.get("/ledger.csv").text), "export.ledger"),
    "GET /obligations.csv": (lambda w: (w.as_admin(), w.portal.get("/obligations.csv").text),
                             "export.obligations"),
    "GET /audit.csv": (lambda w: (w.as_admin(), w.portal.get("/audit.csv").text), "export.audit"),
    "GET /rules/export.json": (lambda w: (w.as_admin(), w.portal.get("/rules/export.json").text),
                               "export.rules"),
}


def _route_keys(app: Litestar) -> tuple[set[str], set[str]]:
    changing, exports = set(), set()
    for route in app.routes:
        for handler in route.route_handlers:  # type: ignore[union-attr]
            methods = sorted(m for m in handler.http_methods if m not in ("HEAD", "OPTIONS"))
            if not methods:
                continue
            key = f"{', '.join(methods)} {route.path}"
            if STATE_CHANGING & set(methods):
                changing.add(key)
            elif (route.path.endswith((".csv", "export.json")) and not handler.opt.get(PUBLIC)
                  and not route.path.endswith("template.csv")):  # a blank form, no tenant data
                exports.add(key)
    return changing, exports


def test_every_state_changing_route_and_export_is_exercised_or_says_why_not() -> None:
    changing, exports = _route_keys(build_app())
    assert changing - set(ROUTES) - set(NOT_AUDITED) == set(), \
        "a state-changing route with no audit exercise: add it to ROUTES (or say why to NOT_AUDITED)"
    assert exports - set(EXPORTS) == set(), "an export with no audit exercise"
    assert set(ROUTES) | set(NOT_AUDITED) <= changing and set(EXPORTS) <= exports  # none stale


@pytest.fixture
def world(portal: PortalClient, people: People) -> World:
    fraud_desk(people.tenant)
    with tenant_tx(people.tenant.slug) as tx:
        member = create_user(tx, "member@tenant.example", Role.MEMBER, PASSWORD)
        from db.rules.definitions import create_rule

        rule = create_rule(tx, rule_json(), "admin@tenant.example")
    return World(portal, people, member.id, rule.id, create_api_key(people.tenant.slug, "case system")[1])


def _audit_count(tenant: Tenant) -> int:
    return int(scalar(tenant, "SELECT count(*) FROM audit_log"))


def _new_actions(tenant: Tenant, after: int) -> list[str]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute("SELECT action FROM audit_log WHERE id > %s ORDER BY id",
                               [after]).fetchall()
    return [str(r[0]) for r in rows]


@pytest.mark.parametrize("route", sorted(ROUTES) + sorted(EXPORTS))
def test_the_route_records_an_audit_row(world: World, route: str) -> None:
    exercise, action = {**ROUTES, **EXPORTS}[route]
    last = int(scalar(world.tenant, "SELECT coalesce(max(id), 0) FROM audit_log"))
    exercise(world)
    new = _new_actions(world.tenant, last)
    assert any(a == action or a.startswith(action + ".") for a in new), (route, new)


# --- the CLI ------------------------------------------------------------------------------

def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> set[str]:
    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= _commands(sub, f"{prefix}{name} ")
    return found or {prefix.strip()}


READ_ONLY = "reads and prints; changes nothing"
PROCESS = "starts processes; what they change is recorded by the routes and use cases above"
MACHINERY = ("the machinery's own work (claims, recoveries), recorded in the ledger and the runs' "
             "heartbeats; re-running it changes nothing a person decided")
NOT_AUDITED_COMMANDS = {
    "tenant list": READ_ONLY, "stuck": READ_ONLY, "status": READ_ONLY, "events status": READ_ONLY,
    "apikey list": READ_ONLY, "product list": READ_ONLY, "rules list": READ_ONLY,
    "rules show": READ_ONLY, "calendar show": READ_ONLY,
    "rules dry-run": "evaluates a rule and claims nothing",
    "up": PROCESS, "web": PROCESS, "worker": PROCESS, "clock": PROCESS,
    "demo-events": "sends events through the events API, which records them (events.record)",
    "migrate": "schema versions, recorded in control.schema_migrations",
    "seed-demo": "the demo tenant, made with tenant create, client create, user create, apikey "
                 "create, product create and rules create, each recorded",
    "scan": MACHINERY, "sweep": MACHINERY,
    "evidence key": READ_ONLY, "evidence verify-pack": "reads a pack file; changes nothing",
    "evidence seal": MACHINERY + " (what the clock does every EVIDENCE_SEAL_SECONDS)",
    "evidence verify": "reads the chains; its result is kept in evidence_verifications, and a "
                       "break alerts ops",
}


def _rule_file(tmp_path: Path, **changes: object) -> str:
    path = tmp_path / "rule.json"
    path.write_text(json.dumps(rule_json(**changes)))
    return str(path)


def _password_sign_in_off(tenant: Tenant) -> list[str]:
    """Password sign-in off behind a provider, written directly (its own audit rows would be
    counted as the command's, by another actor)."""
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE sign_in_settings SET oidc_issuer = 'https://login.example.com', "
                        "oidc_client_id = 'c', oidc_client_secret = 's', password_enabled = false")
    return ["tenant", "password-sign-in", tenant.slug]


CliExercise = Callable[[Tenant, int, Path], list[str]]
COMMANDS: dict[str, tuple[CliExercise, str]] = {
    "tenant create": (lambda t, r, p: ["tenant", "create", "audited" + t.slug[1:9], "--name", "A",
                                       "--tz", "UTC"], "tenant.create"),
    "tenant unknown-outcome": (lambda t, r, p: ["tenant", "unknown-outcome", t.slug, "hold"],
                               "settings.unknown_outcome"),
    "tenant password-sign-in": (lambda t, r, p: [*_password_sign_in_off(t), "on"],
                                "settings.password_sign_in"),
    "client create": (lambda t, r, p: ["client", "create", "--tenant", t.slug, "--name", "Acme",
                                       "--expires", "2031-01-01"], "client.create"),
    "user create": (lambda t, r, p: ["user", "create", "--tenant", t.slug, "--email", "cli@t.example",
                                     "--role", "member"], "user.create"),
    "ledger": (lambda t, r, p: ["ledger", "--tenant", t.slug, "--csv"], "export.ledger"),
    "apikey create": (lambda t, r, p: ["apikey", "create", "--tenant", t.slug, "--label", "cli"],
                      "api_key.create"),
    "apikey revoke": (lambda t, r, p: ["apikey", "revoke", "--tenant", t.slug,
                                       str(create_api_key(t.slug, "to revoke")[0].id)], "api_key.revoke"),
    "product create": (lambda t, r, p: ["product", "create", "--tenant", t.slug, "whistle", "Whistle"],
                       "product.create"),
    "hierarchy add": (lambda t, r, p: ["hierarchy", "add", "--tenant", t.slug, "region", "east", "East"],
                      "hierarchy.add"),
    "rules create": (lambda t, r, p: ["rules", "create", "--tenant", t.slug,
                                      _rule_file(p, name="From the CLI")], "rule.created"),
    "rules update": (lambda t, r, p: ["rules", "update", "--tenant", t.slug, str(r),
                                      _rule_file(p, name="Renamed")], "rule.edited"),
    "rules disable": (lambda t, r, p: ["rules", "disable", "--tenant", t.slug, str(r)], "rule.disabled"),
    "rules enable": (lambda t, r, p: _disabled_then(["rules", "enable", "--tenant", t.slug, str(r)], t, r),
                     "rule.enabled"),
    "rules export": (lambda t, r, p: ["rules", "export", "--tenant", t.slug], "export.rules"),
    "rules import": (lambda t, r, p: ["rules", "import", "--tenant", t.slug,
                                      _list_file(p)], "rule.created"),
    "calendar set": (lambda t, r, p: ["calendar", "set", "--tenant", t.slug, "--working-days",
                                      "1,2,3,4"], "settings.calendar"),
    "evidence export": (lambda t, r, p: _with_a_claim(t, ["evidence", "export", "--tenant", t.slug,
                                                          "--out", str(p / "pack.zip")]),
                        "export.evidence_pack"),
    "evidence checkpoint": (lambda t, r, p: ["evidence", "checkpoint", "--tenant", t.slug],
                            "evidence.checkpoint.manual"),
    "evidence erase-person": (lambda t, r, p: ["evidence", "erase-person", "--tenant", t.slug,
                                               "--email", _person(t)], "person.erase"),
}


def _with_a_claim(tenant: Tenant, argv: list[str]) -> list[str]:
    """A client whose d7 reminder is claimed: a pack must hold something."""
    from datetime import date, timedelta

    from db.notices.licence_scan import claim_due_milestones
    from tests.integration.builders import add_client

    add_client(tenant, date.today() + timedelta(days=7), name="Packed Ltd")
    with tenant_tx(tenant.slug) as tx:
        claim_due_milestones(tx, datetime.now(UTC))
    return argv


def _person(tenant: Tenant) -> str:
    with tenant_tx(tenant.slug) as tx:
        return create_user(tx, "leaving@tenant.example", Role.MEMBER, PASSWORD).email


def _list_file(tmp_path: Path) -> str:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps([rule_json(name="Imported from the CLI")]))
    return str(path)


def _disabled_then(argv: list[str], tenant: Tenant, rule_id: int) -> list[str]:
    from db.rules.definitions import set_enabled

    with tenant_tx(tenant.slug) as tx:
        set_enabled(tx, rule_id, False, "setup")
    return argv


def test_every_command_is_exercised_or_says_why_it_is_not_audited() -> None:
    commands = _commands(build_parser())
    assert commands - set(COMMANDS) - set(NOT_AUDITED_COMMANDS) == set(), \
        "a command with no audit exercise: add it to COMMANDS (or say why to NOT_AUDITED_COMMANDS)"
    assert set(COMMANDS) | set(NOT_AUDITED_COMMANDS) <= commands  # none stale


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_command_records_an_audit_row_against_the_operator(
    tenant: Tenant, command: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fraud_desk(tenant)
    with tenant_tx(tenant.slug) as tx:
        from db.rules.definitions import create_rule

        rule_id = create_rule(tx, rule_json(), "setup").id
    argv, action = COMMANDS[command]
    last = int(scalar(tenant, "SELECT coalesce(max(id), 0) FROM audit_log"))
    args = argv(tenant, rule_id, tmp_path)
    code, _out, err = run(capsys, *args)
    assert code == 0, err
    target = tenant
    if command == "tenant create":
        from db.platform.tenancy import get_tenant

        target = get_tenant(args[2])
        last = 0
    try:
        with tenant_tx(target.slug) as tx:
            rows = tx.conn.execute("SELECT action, actor_kind, actor_label FROM audit_log "
                                   "WHERE id > %s ORDER BY id", [last]).fetchall()
    finally:
        if target is not tenant:
            remove_tenant(target)
    matching = [r for r in rows if str(r[0]) == action]
    assert matching, (command, rows)
    assert all(str(r[1]) == "cli" and str(r[2]).startswith("cli:") for r in matching)
