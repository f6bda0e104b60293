"""The direct message composer against the standard library's: for any email, both messages
read back the same (every header value, the decoded body), both are 7-bit clean with lines
of at most 998 characters, and for plain ASCII headers and body the bytes are the same."""

from __future__ import annotations

import email.policy
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from email import message_from_bytes
from email.errors import HeaderParseError
from email.header import decode_header, make_header
from email.message import EmailMessage

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tocsin.providers.mime_message import MAX_LINE, MessageComposer
from tocsin.providers.ses import OutgoingEmail

SENDERS = ["Tocsin <notifications@tocsin.example>", "notifications@tocsin.example",
           '"Tocsin, Alerts" <alerts@tocsin.example>', "Zoë Ünïcode <zoe@tocsin.example>"]
# A tenant's sender name as a brand may hold it: a comma, quotes, words outside ASCII, a break.
SENDER_NAMES = ["Acme Compliance", 'Acme, "Legal" GmbH', "Société Générale Conformité", "Ünïcode\r\nBcc: x@y"]
DATE = datetime(2027, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)
PROPERTY = settings(deadline=None, database=None, max_examples=400,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

ATEXT = st.sampled_from("abcxyzABCXYZ0189!#$%&'*+/=?^_`{|}~-")
DOT_ATOM = st.lists(st.text(ATEXT, min_size=1, max_size=12), min_size=1, max_size=4).map(".".join)
ADDRESS = st.builds(lambda local, domain: f"{local}@{domain}", DOT_ATOM, DOT_ATOM)
PRINTABLE = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
WORDS = st.lists(st.text(PRINTABLE, min_size=1, max_size=30), min_size=1, max_size=12).map(" ".join)
# Anything a value could hold, short of what both composers refuse alike (CR/LF in a header).
ANY_LINE = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"),
                   max_size=60)
BODY = st.one_of(
    st.text(max_size=400),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=400),
    st.builds(lambda a, n, b: f"{a}\n{'x' * n}\n{b}", st.text(max_size=40),
              st.integers(990, 1010), st.text(max_size=40)),
)
URL = st.one_of(
    st.none(),
    st.builds(lambda token: f"http://127.0.0.1:8000/unsubscribe/{token}",
              st.text(PRINTABLE, min_size=1, max_size=300)),
    ANY_LINE,
)


def emails() -> st.SearchStrategy[OutgoingEmail]:
    return st.builds(
        OutgoingEmail,
        message_id=st.one_of(st.builds(lambda a, b: f"<{a}@{b}>", DOT_ATOM, DOT_ATOM), ANY_LINE),
        to=st.one_of(ADDRESS, st.builds(lambda n, a: f"{n} <{a}>", ANY_LINE, ADDRESS), ANY_LINE),
        subject=st.one_of(WORDS, ANY_LINE),
        text=BODY,
        tags=st.just({}),
        unsubscribe_url=URL,
        sender_name=st.one_of(st.none(), st.sampled_from(SENDER_NAMES), ANY_LINE),
    )


def read_back(raw: bytes) -> tuple[list[tuple[str, str]], str]:
    """Every header's value, in order, and the decoded body; the transfer encoding only as
    7bit or encoded (the standard library picks base64 where the direct path writes
    quoted-printable: both decode to the same text)."""
    message = message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    headers = []
    for name, value in message.raw_items():
        headers.append((name, _header_value(name, value)))
    return headers, str(message.get_content())


def _header_value(name: str, raw: str) -> str:
    """The header as the standard library reads it; where its own parser crashes on the
    value (CPython's _header_value_parser raises IndexError on some address headers, seen
    once in CI), the value's decoded, unfolded text, which both messages are read by alike."""
    try:
        value = str(email.policy.default.header_fetch_parse(name, raw))
    except (IndexError, HeaderParseError):
        return "undecodable: " + str(make_header(decode_header(re.sub(r"\r?\n(?=[ \t])", "", raw))))
    if name == "Content-Transfer-Encoding":
        assert value in ("7bit", "quoted-printable", "base64")
        value = "7bit" if value == "7bit" else "encoded"
    return value


def assert_sendable(raw: bytes) -> None:
    assert raw.isascii(), "SES asks for content outside ASCII to be encoded"
    assert max(len(line) for line in raw.split(b"\n")) <= MAX_LINE


@PROPERTY
@given(sender=st.sampled_from(SENDERS), outgoing=emails())
@example(sender=SENDERS[0], outgoing=OutgoingEmail(
    "<a@b>", "a@b", "=?utf-8?q?caf=C3=A9?=", "x", {}, unsubscribe_url="x=?y"))
def test_a_message_reads_back_as_the_standard_librarys_does(sender: str, outgoing: OutgoingEmail) -> None:
    composer = MessageComposer(sender)
    try:
        standard = composer.compose_by_stdlib(outgoing, DATE)
    except Exception as refused:  # a value no message may carry: the direct path refuses it too
        with pytest.raises(type(refused)):
            composer.compose(outgoing, DATE)
        return
    composed = composer.compose(outgoing, DATE)
    assert read_back(composed) == read_back(standard)
    assert_sendable(composed)
    assert_sendable(standard)


@PROPERTY
@given(sender=st.sampled_from(SENDERS), to=ADDRESS, subject=WORDS, url=URL,
       text=st.text(st.characters(min_codepoint=0, max_codepoint=0x7F), max_size=400),
       message_id=st.builds(lambda a, b: f"<{a}@{b}>", DOT_ATOM, DOT_ATOM))
@example(sender=SENDERS[0], to="?@0", subject="=", url=None, text="", message_id="<0@0>")
def test_plain_ascii_emails_are_composed_directly_into_the_standard_librarys_bytes(
    sender: str, to: str, subject: str, url: str | None, text: str, message_id: str
) -> None:
    outgoing = OutgoingEmail(message_id, to, subject, text, {}, unsubscribe_url=url)
    composer = MessageComposer(sender)
    # "=?" inside one header value reads as an RFC 2047 word (the stdlib path takes it);
    # across two headers it is nothing.
    direct = not any("=?" in value for value in (subject, to, message_id, url or "")) and (
        url is None or (url.isascii() and url.isprintable() and " " not in url))
    assert composes_directly(composer, outgoing) == direct
    if direct:
        assert composer.compose(outgoing, DATE) == composer.compose_by_stdlib(outgoing, DATE)


@pytest.mark.parametrize("length", range(MAX_LINE - 4, MAX_LINE + 3))
def test_a_header_line_at_the_998_character_limit_stays_whole_and_one_past_it_is_folded_alike(
    length: int,
) -> None:
    composer = MessageComposer(SENDERS[0])
    url = "http://t.example/u/" + "t" * (length - len("List-Unsubscribe: <http://t.example/u/>"))
    subject = "s" * (length - len("Subject: "))
    for outgoing in (OutgoingEmail("<a@b>", "a@b", "Hi", "Body", {}, unsubscribe_url=url),
                     OutgoingEmail("<a@b>", "a@b", subject, "Body", {})):
        composed = composer.compose(outgoing, DATE)
        assert read_back(composed) == read_back(composer.compose_by_stdlib(outgoing, DATE))
        assert composes_directly(composer, outgoing) == (length <= MAX_LINE)
        if length <= MAX_LINE:
            assert composed == composer.compose_by_stdlib(outgoing, DATE)


def composes_directly(composer: MessageComposer, email: OutgoingEmail) -> bool:
    """Whether ``compose`` takes its direct path for this email (its header lines are
    written without the standard library's EmailMessage)."""
    return composer._direct_headers(email, DATE) is not None

def test_an_email_as_tocsin_sends_it_is_composed_directly() -> None:
    outgoing = OutgoingEmail(
        "<delivery-17.acme@tocsin.example>", "member1@example.com", "Access for Client 1 ends in 30 days",
        "Access for Client 1 ends on 2027-03-31. Renew to keep access.\n\nhttp://127.0.0.1/clients/1\n",
        {"tenant": "acme", "delivery": "17"},
        unsubscribe_url="http://127.0.0.1:8000/unsubscribe/" + "t" * 200)
    composer = MessageComposer(SENDERS[0])
    assert composes_directly(composer, outgoing)
    assert composer.compose(outgoing, DATE).decode() == (
        "From: Tocsin <notifications@tocsin.example>\n"
        "To: member1@example.com\n"
        "Subject: Access for Client 1 ends in 30 days\n"
        "Date: Mon, 01 Mar 2027 09:30:15 +0000\n"
        "Message-ID: <delivery-17.acme@tocsin.example>\n"
        f"List-Unsubscribe: <{outgoing.unsubscribe_url}>\n"
        "List-Unsubscribe-Post: List-Unsubscribe=One-Click\n"
        'Content-Type: text/plain; charset="utf-8"\n'
        "Content-Transfer-Encoding: 7bit\n"
        "MIME-Version: 1.0\n"
        "\n"
        "Access for Client 1 ends on 2027-03-31. Renew to keep access.\n\nhttp://127.0.0.1/clients/1\n")


def test_a_non_ascii_body_is_sent_quoted_printable_and_reads_back_whole() -> None:
    text = "Zoë's access ends soon.  \n" + "é" * 600 + "\n=?not a word?=\n"
    outgoing = OutgoingEmail("<a@b>", "a@b", "Access ends", text, {})
    composed = MessageComposer(SENDERS[0]).compose(outgoing, DATE)
    assert b"Content-Transfer-Encoding: quoted-printable\n" in composed
    assert max(len(line) for line in composed.split(b"\n\n", 1)[1].split(b"\n")) <= 76
    assert read_back(composed)[1] == text
    assert_sendable(composed)


def test_a_display_name_is_left_to_the_standard_library() -> None:
    composer = MessageComposer(SENDERS[0])
    outgoing = OutgoingEmail("<a@b>", "Zoë <zoe@example.com>", "Hi", "x", {})
    assert not composes_directly(composer, outgoing)
    headers = dict(read_back(composer.compose(outgoing, DATE))[0])
    assert (headers["To"], headers["Subject"]) == (outgoing.to, outgoing.subject)


@pytest.mark.parametrize("name", SENDER_NAMES)
def test_the_tenants_sender_name_goes_on_from_with_the_senders_address_encoded_to_read_back_whole(
    name: str,
) -> None:
    composer = MessageComposer(SENDERS[0])
    outgoing = OutgoingEmail("<a@b>", "zoe@example.com", "Hi", "x", {}, sender_name=name)
    composed = composer.compose(outgoing, DATE)
    assert_sendable(composed)
    message = message_from_bytes(composed, policy=email.policy.default)
    sender = message["From"].addresses[0]
    assert (sender.display_name, sender.addr_spec) == (" ".join(name.split()), "notifications@tocsin.example")
    assert "Bcc" not in message
    assert composed == composer.compose(outgoing, DATE)  # the kept line is the same line
    assert read_back(composed) == read_back(composer.compose_by_stdlib(outgoing, DATE))


def test_without_a_sender_name_from_is_the_configured_sender() -> None:
    composed = MessageComposer(SENDERS[0]).compose(OutgoingEmail("<a@b>", "a@b", "Hi", "x", {}), DATE)
    assert composed.startswith(b"From: Tocsin <notifications@tocsin.example>\n")


@pytest.mark.parametrize("subject", ["Résumé", "Northwind: Zugang endet in 7 Tagen, bitte verlängern",
                                     "שלום " * 30, "accès: le 7 décembre 2026 😀 " + "é" * 80])
def test_a_non_ascii_subject_is_written_directly_as_rfc_2047_words_that_read_back_whole(
    subject: str,
) -> None:
    subject = " ".join(subject.split())
    composer = MessageComposer(SENDERS[0])
    outgoing = OutgoingEmail("<a@b>", "zoe@example.com", subject, "x", {})
    assert composes_directly(composer, outgoing)
    composed = composer.compose(outgoing, DATE)
    assert read_back(composed) == read_back(composer.compose_by_stdlib(outgoing, DATE))
    assert dict(read_back(composed)[0])["Subject"] == subject
    assert max(len(line) for line in composed.split(b"\n")) <= 78
    assert_sendable(composed)


def test_the_date_is_written_in_its_own_offset_as_the_standard_library_writes_it() -> None:
    composer = MessageComposer(SENDERS[0])
    outgoing = OutgoingEmail("<a@b>", "a@b", "Hi", "x", {})
    for date in (DATE, DATE.astimezone(timezone(timedelta(hours=-5)))):
        assert composer.compose(outgoing, date) == composer.compose_by_stdlib(outgoing, date)


def read_parts(raw: bytes) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The headers (Content-Type without its boundary) and each part's type and decoded text."""
    message = message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    headers = [(name, message.get_content_type() if name == "Content-Type" else _header_value(name, value))
               for name, value in message.raw_items()]
    # The HTML part writes characters outside ASCII as character references: read as HTML.
    parts = [(part.get_content_type(), _references_read(str(part.get_content())))  # type: ignore[attr-defined]
             for part in message.iter_parts()]
    return headers, parts


def _references_read(text: str) -> str:
    """Decimal character references as the characters they stand for (literally: HTML5 would
    read &#128; as €, but the composer writes every character as its own code point)."""
    return re.sub(r"&#(\d+);", lambda m: chr(int(m.group(1))), text)


@settings(deadline=None, database=None, max_examples=60,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sender=st.sampled_from(SENDERS), outgoing=emails(), html=BODY)
def test_a_multipart_message_reads_back_as_the_standard_librarys_does(
    sender: str, outgoing: OutgoingEmail, html: str
) -> None:
    outgoing = replace(outgoing, html=html)
    composer = MessageComposer(sender)
    try:
        standard = composer.compose_by_stdlib(outgoing, DATE)
    except Exception as refused:
        with pytest.raises(type(refused)):
            composer.compose(outgoing, DATE)
        return
    composed = composer.compose(outgoing, DATE)
    assert read_parts(composed) == read_parts(standard)
    headers, parts = read_parts(composed)
    assert dict(headers)["Content-Type"] == "multipart/alternative"
    assert [kind for kind, _ in parts] == ["text/plain", "text/html"]
    assert_sendable(composed)


def test_a_multipart_email_keeps_the_one_click_headers_and_a_boundary_of_its_message_id() -> None:
    boundary = "=_" + "0" * 8
    outgoing = OutgoingEmail("<delivery-17.acme@tocsin.example>", "member1@example.com",
                             "Access ends", f"Plain {boundary} text\n", {},
                             unsubscribe_url="http://127.0.0.1:8000/unsubscribe/t",
                             html="<p>Zoë's <b>access</b> ends=soon</p>\n" + ("x" * 80 + "\n") * 25)
    composer = MessageComposer(SENDERS[0])
    first = composer.compose(outgoing, DATE)
    assert first == composer.compose(outgoing, DATE)  # a resend is the same message
    assert composes_directly(composer, outgoing)
    head = first.split(b"\n\n", 1)[0].decode()
    assert "List-Unsubscribe: <http://127.0.0.1:8000/unsubscribe/t>\n" in head
    assert "List-Unsubscribe-Post: List-Unsubscribe=One-Click\n" in head
    assert "Message-ID: <delivery-17.acme@tocsin.example>\n" in head
    assert read_parts(first)[1] == [("text/plain", outgoing.text), ("text/html", outgoing.html)]
    assert b"Zo&#235;'s <b>access</b> ends=soon" in first  # 7bit, no encoding to pay for
    assert_sendable(first)


def test_an_html_part_with_a_line_too_long_for_7bit_goes_base64_and_reads_back_whole() -> None:
    outgoing = OutgoingEmail("<a@b>", "a@b", "Hi", "x", {}, html="<p>" + "é" * 2000 + "</p>")
    composed = MessageComposer(SENDERS[0]).compose(outgoing, DATE)
    assert b"Content-Transfer-Encoding: base64\n" in composed
    assert read_parts(composed)[1][1] == ("text/html", outgoing.html + "\n")
    assert_sendable(composed)


@pytest.mark.parametrize("reply_to", ["help@acme.example", "Acme Help <help@acme.example>"])
def test_the_brands_reply_to_reads_back_as_the_standard_librarys(reply_to: str) -> None:
    composer = MessageComposer(SENDERS[0])
    outgoing = OutgoingEmail("<a@b>", "zoe@example.com", "Hi", "x", {}, html="<p>x</p>", reply_to=reply_to)
    composed = composer.compose(outgoing, DATE)
    assert read_parts(composed) == read_parts(composer.compose_by_stdlib(outgoing, DATE))
    assert dict(read_parts(composed)[0])["Reply-To"] == reply_to
    assert composes_directly(composer, outgoing) == ("<" not in reply_to)
