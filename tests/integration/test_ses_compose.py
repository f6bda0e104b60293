"""The raw message the SES adapter composes: building each header class once (for speed),
or writing plain ASCII headers directly, changes no byte of what the standard header
registry makes (tests/unit/test_mime_message.py compares the two composers closely)."""

from __future__ import annotations

import email.policy
import re
from dataclasses import replace
from email.headerregistry import HeaderRegistry

import pytest

import tocsin.providers.mime_message as mime_message
from tests.integration.conftest import SesOutbox
from tests.support.faulty_ses import FaultySes
from tocsin.core.settings import load_settings
from tocsin.providers.mime_message import MessageComposer
from tocsin.providers.ses import OutgoingEmail, SesMailer, aws_client

CASES = [
    OutgoingEmail("<d.1@tocsin.example>", "member1@example.com", "Access ends in 30 days",
                  "Access for Client 1 ends soon.\n\nhttp://127.0.0.1/clients/1",
                  {"tenant": "a", "delivery": "1"},
                  unsubscribe_url="http://127.0.0.1:8000/unsubscribe/" + "t" * 300),
    OutgoingEmail("<d.2@tocsin.example>", "Zoë Ünïcode <zoe@example.com>",
                  "Résumé: a long subject " + "that goes on " * 12, "Body é ü\nsecond line", {}),
]


def _without_date(raw: bytes) -> bytes:
    return re.sub(rb"Date: [^\r\n]*", b"Date: -", raw)


def test_a_composed_message_is_byte_for_byte_what_the_standard_header_registry_makes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = load_settings()
    composed = [_without_date(SesMailer(settings).compose(case)) for case in CASES * 2]  # reused
    monkeypatch.setattr(mime_message, "HEADERS_UNFOLDED",
                        email.policy.default.clone(max_line_length=998, cte_type="7bit"))
    stdlib = MessageComposer(settings.mail_from)
    standard = [_without_date(stdlib.compose_by_stdlib(case)) for case in CASES * 2]
    assert composed == standard
    assert b"List-Unsubscribe: <http://127.0.0.1:8000/unsubscribe/" + b"t" * 300 + b">" in composed[0]


def test_each_header_class_is_built_once() -> None:
    registry = mime_message.HEADERS_UNFOLDED.header_factory
    assert isinstance(registry, HeaderRegistry)
    assert registry["Subject"] is registry["subject"]
    assert registry["To"] is not registry["Subject"]


def test_every_send_names_the_configured_ses_configuration_set(ses: SesOutbox) -> None:
    """The configuration set's event destination is what lets an SES event settle an unknown
    outcome instead of a resend: it must be named on every send once it is set."""
    settings = replace(load_settings(), ses_configuration_set="tocsin-events")
    aws_client(settings, "sesv2").create_configuration_set(ConfigurationSetName="tocsin-events")
    with FaultySes(ses.endpoint) as proxy:
        mailer = SesMailer(replace(settings, ses_endpoint_url=proxy.url))
        mailer.send(CASES[0])
        SesMailer(replace(load_settings(), ses_endpoint_url=proxy.url)).send(CASES[0])
    assert [s.configuration_set for s in proxy.sends] == ["tocsin-events", None]
    assert len(ses.sent()) == 2
