"""Slack and Teams in the portal: an administrator turns Slack on with the organisation's
channel URL on the Channels page (shown masked, with the channel's health); a member then
sees Slack in the preference centre, saves a URL of their own and turns a category off; the
defaults page and the rule builder offer only enabled chat channels. Members cannot switch
channels; bad URLs get a message."""

from __future__ import annotations

from db.people.sms_settings import save_phone
from db.people.users import create_user
from db.platform.tenancy import tenant_tx
from domain.people.identity import Role
from tests.integration.builders import scalar
from tests.integration.portal_support import PASSWORD, People, PortalClient, csrf_token, signed_in
from tests.integration.rule_builders import add_product

SLACK_URL = "https://hooks.slack.com/services/T0001/B0001/abcdefSECRETxyz9"


def _post(portal: PortalClient, path: str, page: str, **fields: str) -> int:
    token = csrf_token(portal.get(page).text)
    return int(portal.post(path, data={"_csrf_token": token, **fields}, follow_redirects=False).status_code)


def test_an_admin_turns_slack_on_and_the_channels_page_shows_it_masked_with_its_health(
    portal: PortalClient, people: People,
) -> None:
    signed_in(portal, people, people.admin)
    before = portal.get("/channels").text
    assert 'id="channel-slack"' in before and 'id="channel-teams"' in before
    assert _post(portal, "/channels/slack", "/channels", enabled="on", webhook_url=SLACK_URL) == 303
    page = portal.get("/channels?done=slack").text
    slack = page.split('id="channel-slack"')[1].split("</section>")[0]
    assert "Slack saved." in slack and "status-active" in slack
    assert "hooks.slack.com/…xyz9" in slack and "SECRET" not in page  # the URL is a credential
    assert "Last success" in slack and "Never" in slack and "Closed" in slack
    # Saved again without a URL, keeping the stored one: still there.
    assert _post(portal, "/channels/slack", "/channels", enabled="on", keep_url="on") == 303
    assert scalar(people.tenant, "SELECT webhook_url FROM chat_channels WHERE channel = 'slack'") == SLACK_URL
    audit = scalar(people.tenant, "SELECT after::text FROM audit_log WHERE action = 'chat_channel.save' "
                                  "ORDER BY id LIMIT 1")
    assert "SECRET" not in str(audit) and '"channel_url_set": true' in str(audit)


def test_a_member_sees_slack_once_enabled_saves_a_url_and_turns_a_category_off(
    portal: PortalClient, people: People,
) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        member = create_user(tx, "analyst@northwind.example", Role.MEMBER, PASSWORD)
    signed_in(portal, people, member)
    assert 'id="chat-title"' not in portal.get("/preferences").text  # nothing enabled yet
    assert _post(portal, "/channels/slack", "/preferences", enabled="on") == 403
    portal.cookies.clear()
    signed_in(portal, people, people.admin)
    assert _post(portal, "/channels/slack", "/channels", enabled="on") == 303
    portal.cookies.clear()
    signed_in(portal, people, member)
    page = portal.get("/preferences").text
    assert 'id="chat-title"' in page and "Your Slack incoming-webhook URL" in page
    assert "Your Microsoft Teams incoming-webhook URL" not in page
    assert _post(portal, "/preferences/chat/slack", "/preferences", webhook_url=SLACK_URL) == 303
    assert _post(portal, "/preferences/categories/case_alert/chat", "/preferences") == 303  # unticked
    page = portal.get("/preferences").text
    assert "hooks.slack.com/…xyz9" in page
    row = page.split('id="chat-case_alert"')[1].split("</tr>")[0]
    assert 'name="slack"' in row and "checked" not in row
    assert scalar(people.tenant, "SELECT enabled FROM chat_preferences WHERE user_id = %s "
                                 "AND category = 'case_alert' AND channel = 'slack'", member.id) is False
    assert _post(portal, "/preferences/chat/teams", "/preferences", webhook_url="x") == 400
    assert _post(portal, "/preferences/defaults/case_alert/chat", "/preferences", slack="on") == 403


def test_bad_chat_urls_get_a_message_and_nothing_is_written(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.admin)
    for url in ("ftp://hooks.slack.com/x", "https://user:pw@hooks.slack.com/x", "not a url"):
        assert _post(portal, "/channels/slack", "/channels", enabled="on", webhook_url=url) == 400, url
    assert _post(portal, "/channels/skype", "/channels", enabled="on") == 400
    assert scalar(people.tenant, "SELECT count(*) FROM chat_channels") == 0


def test_the_defaults_page_and_the_rule_builder_offer_only_enabled_chat_channels(
    portal: PortalClient, people: People,
) -> None:
    add_product(people.tenant)
    signed_in(portal, people, people.admin)
    assert 'id="chat-defaults-title"' not in portal.get("/preferences/defaults").text
    builder = portal.get("/rules/new?product=fraud").text
    assert 'value="email"' in builder and 'value="teams"' not in builder and 'value="slack"' not in builder
    assert _post(portal, "/channels/teams", "/channels", enabled="on") == 303
    defaults = portal.get("/preferences/defaults").text
    assert 'id="chat-defaults-title"' in defaults and "Microsoft Teams" in defaults
    builder = portal.get("/rules/new?product=fraud").text
    assert 'name="channels" value="teams"' in builder and 'value="slack"' not in builder
    assert _post(portal, "/preferences/defaults/case_alert/chat", "/preferences/defaults") == 303
    assert scalar(people.tenant, "SELECT enabled FROM chat_category_defaults WHERE category = 'case_alert' "
                                 "AND channel = 'teams'") is False


def test_the_rule_builder_offers_texts_once_someone_gave_a_mobile_number(
    portal: PortalClient, people: People,
) -> None:
    add_product(people.tenant)
    signed_in(portal, people, people.admin)
    assert 'value="sms"' not in portal.get("/rules/new?product=fraud").text
    with tenant_tx(people.tenant.slug) as tx:
        save_phone(tx, people.admin.id, "+447400123456")
    builder = portal.get("/rules/new?product=fraud").text
    assert 'name="channels" value="sms"' in builder and "Text message (SMS)" in builder


def test_an_admin_sets_the_tenants_sms_cap_beside_this_months_spend_and_a_bad_one_is_refused(
    portal: PortalClient, people: People,
) -> None:
    signed_in(portal, people, people.admin)
    page = portal.get("/channels").text
    assert 'id="sms-cap"' in page and "of a cap of 50.00" in page and "at most 50.00" in page
    token = csrf_token(page)
    for typed, says in (("-5", "cannot be negative"), ("50.5", "cannot be above")):
        refused = portal.post("/channels/sms/cap", data={"_csrf_token": token, "cap": typed},
                              follow_redirects=False)
        assert refused.status_code == 422 and says in refused.text
    assert scalar(people.tenant, "SELECT count(*) FROM sms_spend_cap") == 0
    assert _post(portal, "/channels/sms/cap", "/channels", cap="12.5") == 303
    saved = portal.get("/channels?done=sms_cap").text
    assert "Monthly SMS spend cap saved." in saved and "of a cap of 12.50" in saved
    assert 'value="12.50"' in saved
    audit = scalar(people.tenant, "SELECT after::text FROM audit_log WHERE action = 'sms.spend_cap'")
    assert '"12.50"' in str(audit)


def test_a_member_cannot_set_the_sms_cap(portal: PortalClient, people: People) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        member = create_user(tx, "member-cap@example.com", Role.MEMBER, PASSWORD)
    signed_in(portal, people, member)
    token = csrf_token(portal.get("/preferences").text)
    answer = portal.post("/channels/sms/cap", data={"_csrf_token": token, "cap": "1"}, follow_redirects=False)
    assert answer.status_code == 403
    assert scalar(people.tenant, "SELECT count(*) FROM sms_spend_cap") == 0
