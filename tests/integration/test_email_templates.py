"""Email templates over HTTP: an administrator saves a template for an email kind and
language, and the reminder the local SES endpoint accepts next says what it says; a template
that does not parse is refused with its line and column; every save is a version (who, when,
what changed) that can be restored; the live preview renders for a real recipient and client;
a test email reaches the admin through the delivery path; members are refused and another
tenant's versions do not exist. At send time a template that fails sends the shipped copy,
and the delivery says so in the ledger and on Needs attention."""

from __future__ import annotations

import html
import re

from actors.email import deliver_email
from db.people.users import create_user
from db.platform.tenancy import tenant_tx
from domain.people.identity import Role
from tests.integration.builders import scalar
from tests.integration.conftest import RunningWorker, SentEmail, SesOutbox, new_tenant, remove_tenant
from tests.integration.portal_support import HTMX, PASSWORD, People, PortalClient, csrf_token, sign_in

EDITOR = "/settings/email-templates/licence_reminder/en"
SHIPPED_SUBJECT = "Northwind Analytics: one week until access pauses"


def _signed_in_admin(portal: PortalClient, people: People) -> str:
    assert sign_in(portal, people.tenant.slug, people.admin.email).status_code == 303
    page = portal.get(EDITOR)
    assert page.status_code == 200
    return csrf_token(page.text)


def _form(token: str, subject: str, body: str = "{{ default.body }}",
          preheader: str = "{{ default.preheader }}") -> dict[str, str]:
    return {"_csrf_token": token, "subject": subject, "preheader": preheader, "body": body}


def _send_reminder(people: People, worker: RunningWorker, ses: SesOutbox) -> tuple[int, SentEmail]:
    """The client user's pending d7 reminder (the people fixture claimed and prepared it),
    sent through the worker: its delivery id and what the SES endpoint accepted."""
    delivery_id = int(scalar(
        people.tenant, "SELECT d.id FROM notification_deliveries d JOIN notifications n ON "
        "n.id = d.notification_id WHERE n.recipient_user_id = %s AND d.status = 'pending'",
        people.client_user.id))
    before = {m.ses_id for m in ses.sent()}
    deliver_email.send(people.tenant.slug, delivery_id)
    worker.drain()
    [sent] = [m for m in ses.sent() if m.ses_id not in before]
    return delivery_id, sent


def test_a_saved_template_is_used_in_the_reminder_the_ses_endpoint_accepts(
    people: People, portal: PortalClient, worker: RunningWorker, ses: SesOutbox
) -> None:
    token = _signed_in_admin(portal, people)
    listing = portal.get("/settings/email-templates")
    assert listing.status_code == 200 and "Shipped text" in listing.text
    saved = portal.post(EDITOR, data=_form(
        token, "{{ client.name }}: renew before {{ due.date }}",
        "Hello {{ recipient.name | default: 'there' }},\n\n{{ default.body }}\n\n"
        "Your team at {{ tenant.name }}"),
        follow_redirects=False)
    assert saved.status_code == 303
    assert "Version 1" in portal.get("/settings/email-templates").text

    _, sent = _send_reminder(people, worker, ses)
    assert sent.to == people.client_user.email
    assert sent.subject.startswith("Northwind Analytics: renew before ")
    assert sent.body.startswith(sent.subject)  # the heading is the template's subject too
    assert "Hello " in sent.body and f"Your team at {people.tenant.name}" in sent.body
    assert "Renew access: http" in sent.body  # the action stays the layout's
    assert sent.html is not None and "Your team at" in sent.html
    assert sent.content_type == "multipart/alternative"
    assert scalar(people.tenant, "SELECT count(*) FROM notification_deliveries "
                  "WHERE template_fallback IS NOT NULL") == 0


def test_a_template_that_does_not_parse_is_refused_with_its_line_and_column(
    people: People, portal: PortalClient
) -> None:
    token = _signed_in_admin(portal, people)
    refused = portal.post(EDITOR, data=_form(token, "{{ default.subject }}",
                                             "Hello,\n\nRenew {% if %} now"))
    assert refused.status_code == 422
    assert re.search(r"line 3, column \d+", html.unescape(refused.text))
    assert 'aria-invalid="true"' in refused.text
    assert "Renew {% if %} now" in html.unescape(refused.text)  # what was typed is kept
    assert scalar(people.tenant, "SELECT count(*) FROM email_templates") == 0
    assert scalar(people.tenant, "SELECT count(*) FROM audit_log WHERE action LIKE 'email_template.%%'") == 0
    preview = portal.post(f"{EDITOR}/preview", data=_form(token, "{{ unclosed"), headers=HTMX)
    assert preview.status_code == 200 and "line 1, column" in preview.text


def test_every_save_is_a_version_with_who_and_what_changed_and_an_old_one_can_be_restored(
    people: People, portal: PortalClient
) -> None:
    token = _signed_in_admin(portal, people)
    for subject in ("First {{ client.name }}", "Second {{ client.name }}"):
        assert portal.post(EDITOR, data=_form(token, subject), follow_redirects=False).status_code == 303
    page = html.unescape(portal.get(EDITOR).text)
    assert "Version 2" in page and "Version 1" in page
    assert "-First {{ client.name }}" in page and "+Second {{ client.name }}" in page
    assert people.admin.email in page or people.admin.display_name in page

    restored = portal.post(f"{EDITOR}/versions/1/restore", data={"_csrf_token": token},
                           follow_redirects=False)
    assert restored.status_code == 303
    assert scalar(people.tenant, "SELECT subject || ' v' || version FROM email_templates") == \
        "First {{ client.name }} v3"
    assert "restored from version 1" in portal.get(EDITOR).text
    actions = scalar(people.tenant, "SELECT string_agg(action, ',' ORDER BY id) FROM audit_log "
                     "WHERE action LIKE 'email_template.%%'")
    assert actions == "email_template.save,email_template.save,email_template.restore"
    missing = portal.post(f"{EDITOR}/versions/9/restore", data={"_csrf_token": token},
                          follow_redirects=False)
    assert missing.status_code == 404


def test_the_live_preview_renders_html_and_text_for_a_real_recipient_and_client(
    people: People, portal: PortalClient
) -> None:
    token = _signed_in_admin(portal, people)
    form = {**_form(token, "{{ client.name }} for {{ recipient.name }}", "Dear {{ recipient.name }}"),
            "recipient": str(people.client_user.id), "about": f"client:{people.other_client.id}"}
    preview = portal.post(f"{EDITOR}/preview", data=form, headers=HTMX)
    assert preview.status_code == 200
    text = html.unescape(preview.text)
    name = people.client_user.display_name
    assert f"Summit Energy for {name}" in text and f"Dear {name}" in text
    assert 'width="600"' in preview.text and 'width="375"' in preview.text
    frame = re.search(r'src="([^"]+)"', preview.text)
    assert frame
    document = portal.get(html.unescape(frame.group(1)))
    assert document.status_code == 200 and f"Dear {html.escape(name)}" in document.text
    assert "style-src 'unsafe-inline'" in document.headers["content-security-policy"]
    assert scalar(people.tenant, "SELECT count(*) FROM email_templates") == 0  # a preview saves nothing
    # Opened afresh, the page frames the template in use (the shipped text), not the draft.
    fresh = re.search(r'<iframe [^>]*src="([^"]+)"', portal.get(EDITOR).text)
    assert fresh
    shipped = portal.get(html.unescape(fresh.group(1)))
    assert shipped.status_code == 200 and "Dear " not in shipped.text
    assert "Northwind Analytics" in shipped.text


def test_a_test_email_reaches_the_editing_admin_through_the_delivery_path(
    people: People, portal: PortalClient, worker: RunningWorker, ses: SesOutbox
) -> None:
    token = _signed_in_admin(portal, people)
    before = len([m for m in ses.sent() if m.to == people.admin.email])
    sent = portal.post(f"{EDITOR}/test", data=_form(token, "Trying {{ client.name }} out"),
                       follow_redirects=False)
    assert sent.status_code == 303
    worker.drain()
    mine = [m for m in ses.sent() if m.to == people.admin.email]
    assert len(mine) == before + 1
    assert mine[-1].subject == "Trying Northwind Analytics out"
    assert mine[-1].html is not None
    assert scalar(people.tenant, "SELECT count(*) FROM audit_log WHERE action = 'email_template.test'") == 1
    assert scalar(people.tenant, "SELECT count(*) FROM email_templates") == 0  # a test saves nothing
    refused = portal.post(f"{EDITOR}/test", data=_form(token, "{% if %}"))
    assert refused.status_code == 422 and "line 1, column" in refused.text


def test_members_are_refused_and_another_tenants_versions_are_not_found(
    people: People, portal: PortalClient
) -> None:
    token = _signed_in_admin(portal, people)
    for subject in ("One", "Two"):
        assert portal.post(EDITOR, data=_form(token, subject), follow_redirects=False).status_code == 303
    assert portal.get("/settings/email-templates/no_such_kind/en").status_code == 404

    with tenant_tx(people.tenant.slug) as tx:
        create_user(tx, "member@tenant.example", Role.MEMBER, PASSWORD)
    assert sign_in(portal, people.tenant.slug, "member@tenant.example").status_code == 303
    token = csrf_token(portal.get("/preferences").text)
    assert portal.get("/settings/email-templates").status_code == 403
    assert portal.get(EDITOR).status_code == 403
    assert portal.post(EDITOR, data=_form(token, "Mine"), follow_redirects=False).status_code == 403
    assert portal.post(f"{EDITOR}/versions/1/restore", data={"_csrf_token": token},
                       follow_redirects=False).status_code == 403

    other = new_tenant()
    try:
        with tenant_tx(other.slug) as tx:
            create_user(tx, "admin@other.example", Role.ADMIN, PASSWORD)
        assert sign_in(portal, other.slug, "admin@other.example").status_code == 303
        token = csrf_token(portal.get(EDITOR).text)
        assert portal.post(f"{EDITOR}/versions/2/restore", data={"_csrf_token": token},
                           follow_redirects=False).status_code == 404
        stranger = int(scalar(people.tenant, "SELECT max(id) FROM users")) + 1000
        assert portal.get(f"{EDITOR}/document?recipient={stranger}").status_code == 404
        assert scalar(other, "SELECT count(*) FROM email_templates") == 0
    finally:
        remove_tenant(other)
    assert scalar(people.tenant, "SELECT subject FROM email_templates") == "Two"


def test_a_template_that_fails_at_send_time_sends_the_shipped_copy_and_the_delivery_says_so(
    people: People, portal: PortalClient, worker: RunningWorker, ses: SesOutbox
) -> None:
    token = _signed_in_admin(portal, people)
    # It parses (so it is saved), but fails when rendered: a division by zero.
    broken = "{{ client.name }} {{ 10 | divided_by: 0 }}"
    assert portal.post(EDITOR, data=_form(token, broken), follow_redirects=False).status_code == 303

    delivery_id, sent = _send_reminder(people, worker, ses)
    assert sent.subject == SHIPPED_SUBJECT  # the shipped copy: the reminder was not lost
    why = scalar(people.tenant, "SELECT template_fallback FROM notification_deliveries WHERE id = %s",
                 delivery_id)
    assert why.startswith("the licence_reminder template (en) failed")
    assert "Sent with the shipped template" in portal.get("/ledger").text
    attention = portal.get("/ledger/attention").text
    assert "Emails sent with the shipped template" in attention and people.client_user.email in attention

    fixed = portal.post(EDITOR, data=_form(token, "{{ default.subject }}"), follow_redirects=False)
    assert fixed.status_code == 303
    assert people.client_user.email not in portal.get("/ledger/attention").text.split(
        "Emails sent with the shipped template")[1].split("</section>")[0]


def test_every_kind_in_every_language_opens_with_a_preview_of_its_shipped_text(
    people: People, portal: PortalClient
) -> None:
    from db.delivery.template_samples import sample_facts
    from domain.delivery.email_kinds import KINDS, kind_of
    from domain.people.locales import SHIPPED_LOCALES

    _signed_in_admin(portal, people)
    for kind in KINDS:
        with tenant_tx(people.tenant.slug) as tx:  # the sample is an email of that very kind
            facts, _ = sample_facts(tx, kind, "en", people.admin.id, "", people.tenant.name)
        assert kind_of(facts) == kind
        for locale in SHIPPED_LOCALES:
            page = portal.get(f"/settings/email-templates/{kind}/{locale}")
            assert page.status_code == 200, (kind, locale)
            assert 'class="template-text"' in page.text and "flash-error" not in page.text, (kind, locale)
