"""The preference centre's text messages and the administrators' email failover, over HTTP:
a number that cannot take texts is refused with what to change, next to the field; texts
turned on per category; STOP and resume; only administrators choose the failover."""

from __future__ import annotations

from db.people.users import create_user
from db.platform.tenancy import tenant_tx
from domain.people.identity import Role
from tests.integration.builders import scalar
from tests.integration.portal_support import PASSWORD, People, PortalClient, csrf_token, signed_in


def _post(portal: PortalClient, path: str, page: str, **data: str) -> int:
    token = csrf_token(portal.get(page).text)
    return portal.post(path, data={"_csrf_token": token, **data}, follow_redirects=False).status_code


def test_a_member_saves_a_mobile_number_in_e164_and_turns_texts_on_for_a_category(
    portal: PortalClient, people: People,
) -> None:
    signed_in(portal, people, people.admin)
    assert portal.get("/preferences/texts").status_code == 200
    assert _post(portal, "/preferences/texts/phone", "/preferences/texts", phone="0044 7400 123456") == 303
    assert _post(portal, "/preferences/texts/category", "/preferences/texts",
                 category="report_ready", sms="on") == 303
    page = portal.get("/preferences/texts")
    assert 'value="+447400123456"' in page.text
    assert "Texts on" in page.text.split('id="texts-report_ready"')[1].split("</li>")[0]
    tenant = people.tenant
    assert scalar(tenant, "SELECT phone FROM sms_numbers") == "+447400123456"
    assert scalar(tenant, "SELECT sms FROM sms_preferences WHERE category = 'report_ready'") is True


def test_a_number_without_a_country_code_or_not_a_mobile_is_refused_next_to_the_field(
    portal: PortalClient, people: People,
) -> None:
    signed_in(portal, people, people.admin)
    token = csrf_token(portal.get("/preferences/texts").text)
    for typed, says in (("07400 123456", "country code"), ("+44 20 7946 0958", "mobile number")):
        answer = portal.post("/preferences/texts/phone", data={"_csrf_token": token, "phone": typed},
                             follow_redirects=False)
        assert answer.status_code == 422
        error = answer.text.split('id="phone-error"')[1].split("</p>")[0]
        assert says in error
        assert f'value="{typed}"' in answer.text  # what was typed stays, to be corrected
    assert scalar(people.tenant, "SELECT count(*) FROM sms_numbers") == 0


def test_stop_puts_the_number_on_the_stop_list_and_resume_takes_it_off(
    portal: PortalClient, people: People,
) -> None:
    signed_in(portal, people, people.admin)
    _post(portal, "/preferences/texts/phone", "/preferences/texts", phone="+447400123456")
    assert _post(portal, "/preferences/texts/stop", "/preferences/texts", sms="on") == 303
    assert scalar(people.tenant, "SELECT source FROM sms_opt_outs") == "person"
    assert "Resume texts" in portal.get("/preferences/texts").text
    assert _post(portal, "/preferences/texts/stop", "/preferences/texts", sms="off") == 303
    assert scalar(people.tenant, "SELECT count(*) FROM sms_opt_outs") == 0


def test_only_administrators_choose_the_email_failover(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.admin)
    assert _post(portal, "/channels/email-failover", "/channels/email-failover", on_paused="on",
                 throttled_minutes="30", run_of_5xx="3") == 303
    page = portal.get("/channels/email-failover")
    assert 'id="on_paused" name="on_paused" value="on" checked' in page.text
    assert 'value="30"' in page.text
    assert 'id="channel-sms"' in portal.get("/channels").text
    with tenant_tx(people.tenant.slug) as tx:
        member = create_user(tx, "texter@northwind.example", Role.MEMBER, PASSWORD)
    portal.cookies.clear()
    signed_in(portal, people, member)
    assert portal.get("/channels/email-failover").status_code == 403
