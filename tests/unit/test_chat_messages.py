"""Slack and Teams decisions (domain/delivery/chat.py, domain/delivery/preferences.py): the
Block Kit message and the Adaptive Card, the URL check, a person's choice resolved, and the
send decision (off cancels, quiet hours defer, critical goes through)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from domain.delivery.channels import CHANNELS, AddressKind, Channel
from domain.delivery.chat import (
    CHAT,
    MAX_TITLE_CHARS,
    ChatMessage,
    ChatStatus,
    message_body,
    slack_blocks,
    teams_card,
    valid_chat_channel,
    valid_chat_url,
)
from domain.delivery.preferences import CHAT_OPTED_OUT, SendAction, chat_decision, resolve_channel_choice
from domain.errors import InvalidInput

MESSAGE = ChatMessage("Case <C-1> & co", "Amount *900* <!here>", "https://tocsin.example/inbox")


def test_slack_gets_a_header_an_escaped_section_and_a_button_into_the_portal() -> None:
    blocks = slack_blocks(MESSAGE)["blocks"]
    assert isinstance(blocks, list)
    header, section, actions = blocks
    assert header["text"]["text"] == "Case <C-1> & co"  # plain_text: shown as written
    assert section["text"] == {"type": "mrkdwn", "text": "Amount *900* &lt;!here&gt;"}
    assert actions["elements"][0]["url"] == "https://tocsin.example/inbox"


def test_a_critical_slack_message_is_marked_and_a_long_title_is_clipped_to_slacks_limit() -> None:
    long = ChatMessage("x" * 400, "", "https://tocsin.example/inbox", critical=True)
    header = slack_blocks(long)["blocks"][0]  # type: ignore[index]
    assert header["text"]["text"].startswith("❗ ") and len(header["text"]["text"]) <= MAX_TITLE_CHARS


def test_teams_gets_an_adaptive_card_with_an_open_url_action() -> None:
    [attachment] = teams_card(MESSAGE)["attachments"]  # type: ignore[misc]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert attachment["content"]["actions"] == [
        {"type": "Action.OpenUrl", "title": "Open in Tocsin", "url": "https://tocsin.example/inbox"}]


def test_every_attempt_posts_the_same_bytes() -> None:
    first = message_body(Channel.SLACK, MESSAGE)
    assert first == message_body(Channel.SLACK, MESSAGE) and json.loads(first)["text"]
    with pytest.raises(ValueError):
        message_body(Channel.EMAIL, MESSAGE)


def test_chat_channels_are_people_facing_rate_limited_and_not_deduplicated() -> None:
    slack, teams = CHANNELS[Channel.SLACK], CHANNELS[Channel.TEAMS]
    assert slack.max_per_second == 1.0 and slack.address_kind is AddressKind.CHAT_WEBHOOK_URL
    assert slack.respects_quiet_hours and teams.respects_quiet_hours
    assert not slack.receiver_dedupes and not teams.receiver_dedupes


@pytest.mark.parametrize(("channel", "url"), [
    ("slack", "https://hooks.slack.com/services/T0/B0/x"),
    ("teams", "https://contoso.webhook.office.com/webhookb2/abc/IncomingWebhook/def"),
    ("teams", "https://prod-01.westeurope.logic.azure.com/workflows/abc"),
])
def test_the_issuers_urls_are_accepted(channel: str, url: str) -> None:
    assert valid_chat_url(valid_chat_channel(channel), url, allow_private=False) == url


@pytest.mark.parametrize(("channel", "url"), [
    ("slack", "https://example.com/services/x"),  # not Slack's
    ("slack", "http://hooks.slack.com/services/x"),  # not https
    ("teams", "https://hooks.slack.com/services/x"),
    ("slack", "https://127.0.0.1/services/x"),  # the SSRF guard on a literal address
])
def test_other_urls_are_refused_unless_private_addresses_are_allowed(channel: str, url: str) -> None:
    with pytest.raises(InvalidInput):
        valid_chat_url(valid_chat_channel(channel), url, allow_private=False)


def test_an_unknown_chat_channel_is_refused() -> None:
    for name in ("email", "sms", "skype"):
        with pytest.raises(InvalidInput):
            valid_chat_channel(name)


def test_a_locked_category_takes_the_tenants_choice_then_the_user_then_the_tenant_then_on() -> None:
    assert resolve_channel_choice(True, False, locked=True) is False
    assert resolve_channel_choice(True, None, locked=True) is True  # locked, no chat default: product's
    assert resolve_channel_choice(False, True, locked=False) is False
    assert resolve_channel_choice(None, False, locked=False) is False
    assert resolve_channel_choice(None, None, locked=False) is True


def test_the_chat_decision_cancels_when_off_defers_in_quiet_hours_and_sends_critical_notices() -> None:
    morning = datetime(2027, 1, 6, 7, 0, tzinfo=UTC)
    assert chat_decision(False, None, critical=True).reason == CHAT_OPTED_OUT
    assert chat_decision(True, morning, critical=False).until == morning
    assert chat_decision(True, morning, critical=True).action is SendAction.SEND
    assert chat_decision(True, None, critical=False).action is SendAction.SEND


def test_a_chat_delivery_ends_only_delivered_failed_or_cancelled() -> None:
    assert CHAT.sources(ChatStatus.SENDING) == {ChatStatus.PENDING, ChatStatus.DEFERRED}
    assert CHAT.sources(ChatStatus.DELIVERED) == {ChatStatus.SENDING}
