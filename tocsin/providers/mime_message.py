"""The raw message of one email (RFC 5322), as SES sends it: a single text/plain part, or,
when the email has an HTML rendering, multipart/alternative with the text/plain part first and
the text/html part second (RFC 2046: the last part is the richest; a client that cannot show
HTML shows the text).

The standard library's `email` package builds every message by parsing each header value
it is given and folding it again on output: about half of what a delivery costs besides the
provider call. Nearly every email Tocsin sends has plain ASCII headers (a bare address, an
ASCII subject, a Message-ID and an unsubscribe URL of our own making), and for those
`MessageComposer` writes the bytes directly: the very bytes the standard library writes,
except that a body it would send as 8bit, or with lines longer than 998 characters, is
written quoted-printable (76-character lines). Anything else — a display name, a non-ASCII
subject (RFC 2047 words), anything the standard library would rewrite — goes through the
standard library, which is told to keep the message 7-bit clean too.

Accepted by the direct path, each value whole (otherwise the standard library composes it):
  To                 a bare addr-spec, dot-atom@dot-atom (RFC 5322 atext)
  Subject            printable ASCII words joined by single spaces, not empty; or, with
                     characters outside ASCII, any words without control characters
                     joined by single spaces, written as RFC 2047 base64 words
  Message-ID         <dot-atom@dot-atom>
  Reply-To           (when set) a bare addr-spec, as To
  List-Unsubscribe   <URL>, the URL printable ASCII without spaces
  the body           any text (7bit when ASCII with lines of at most 998 characters,
                     else quoted-printable UTF-8)
and in none of them "=?", which the standard library would read as an RFC 2047 word, nor a
header line longer than 998 characters, which it would fold. From is the sender's address,
under the tenant's sender name when its brand names one ("Acme Compliance <alerts@…>"): the
standard library writes each From line once (quoted, or RFC 2047 words for a name outside
ASCII) and the composer keeps it for the next email of that name.

The multipart form's boundary is derived from the Message-ID, so a resend is byte for byte the
same message apart from its Date. "=_" cannot occur in quoted-printable or base64 text, so a
boundary that starts with it cannot collide with an encoded part; a part sent 7bit that
contains the boundary is encoded instead. The HTML part writes characters outside ASCII as
character references and goes 7bit, or base64 when a line is too long (see _html_part).
"""

from __future__ import annotations

import base64
import binascii
import email.policy
import hashlib
import re
from datetime import datetime
from email.headerregistry import Address, BaseHeader, HeaderRegistry
from email.message import EmailMessage
from email.utils import format_datetime, parseaddr
from typing import TYPE_CHECKING

from tocsin.core.clock import utcnow

if TYPE_CHECKING:
    from tocsin.providers.ses import OutgoingEmail

__all__ = ["HEADERS_UNFOLDED", "MAX_LINE", "MessageComposer"]


class _HeaderClasses(HeaderRegistry):
    """The standard registry, but each header's class is built once: HeaderRegistry calls
    type() for every header it parses, a third of the time it takes to compose a message."""

    def __init__(self) -> None:
        super().__init__()
        self._built: dict[str, type[BaseHeader]] = {}

    def __getitem__(self, name: str) -> type[BaseHeader]:
        key = name.lower()
        built = self._built.get(key)
        if built is None:
            built = self._built[key] = super().__getitem__(name)
        return built


MAX_LINE = 998  # characters: RFC 5322's limit for a line, and SES's (1,000 with the CRLF)

# Long headers stay on one line (RFC 5322 allows 998 characters): folding would encode
# List-Unsubscribe's URL as an RFC 2047 word that mail clients cannot follow. 7bit: SES asks
# for content outside ASCII to be encoded, so a non-ASCII body is never sent as 8bit.
HEADERS_UNFOLDED = email.policy.default.clone(max_line_length=MAX_LINE, cte_type="7bit",
                                              header_factory=_HeaderClasses())

_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_DOT_ATOM = rf"{_ATEXT}+(?:\.{_ATEXT}+)*"
_ADDR_SPEC = re.compile(rf"{_DOT_ATOM}@{_DOT_ATOM}")
_MESSAGE_ID = re.compile(rf"<{_DOT_ATOM}@{_DOT_ATOM}>")
_WORDS = re.compile(r"[!-~]+(?: [!-~]+)*")  # printable ASCII, single spaces, none at the ends
# Any other language's words: no control characters, single spaces, none at the ends.
_UNICODE_WORDS = re.compile(r"[^\s\x00-\x1f\x7f-\x9f]+(?: [^\s\x00-\x1f\x7f-\x9f]+)*")
_BRACKETED_URL = re.compile(r"<[!-~]+>")
_WORD_BYTES = 39  # UTF-8 bytes per RFC 2047 word: 52 base64 characters, 64 in all (RFC 2047: <= 75)
_ENCODED_WORD_START = "=?"

_TEXT_PLAIN = 'Content-Type: text/plain; charset="utf-8"\n'
_TEXT_HTML = 'Content-Type: text/html; charset="utf-8"\n'
_ONE_CLICK = "List-Unsubscribe-Post: List-Unsubscribe=One-Click\n"
_FROM_LINES_KEPT = 256  # sender names whose folded From line a composer keeps (one per tenant)


class MessageComposer:
    def __init__(self, sender: str):
        self._sender = sender
        self._address = parseaddr(sender)[1] or sender
        self._from_line = _folded_from(sender)
        self._named_from_lines: dict[str, str] = {}

    def sender_for(self, name: str | None) -> str | Address:
        """The From value: the configured sender, or its address under ``name`` (a tenant's
        sender name; white space, line breaks included, collapsed so it cannot add a header)."""
        name = " ".join((name or "").split())
        return Address(display_name=name, addr_spec=self._address) if name else self._sender

    def _from_line_for(self, name: str | None) -> str:
        name = " ".join((name or "").split())
        if not name:
            return self._from_line
        line = self._named_from_lines.get(name)
        if line is None:
            if len(self._named_from_lines) >= _FROM_LINES_KEPT:
                self._named_from_lines.clear()
            line = self._named_from_lines[name] = _folded_from(self.sender_for(name))
        return line

    def compose(self, email: OutgoingEmail, date: datetime | None = None) -> bytes:
        """The message, dated ``date`` (now when None; an aware datetime)."""
        date = date or utcnow()
        headers = self._direct_headers(email, date)
        if headers is None:
            return self.compose_by_stdlib(email, date)
        if email.html is None:
            encoding, body = _encoded(email.text)
            return (f"{headers}{_TEXT_PLAIN}Content-Transfer-Encoding: {encoding}\n"
                    "MIME-Version: 1.0\n\n").encode() + body
        boundary = "=_" + hashlib.sha256(email.message_id.encode()).hexdigest()[:32]
        encoding, text = _encoded(email.text, avoid=boundary)
        html_encoding, html = _html_part(email.html, boundary)
        # Each part ends with its body's newline plus the one that belongs to the boundary
        # line (RFC 2046), as the standard library writes it.
        return b"".join([
            f'{headers}MIME-Version: 1.0\nContent-Type: multipart/alternative; boundary="{boundary}"\n'
            f"\n--{boundary}\n{_TEXT_PLAIN}Content-Transfer-Encoding: {encoding}\n\n".encode(), text,
            f"\n--{boundary}\n{_TEXT_HTML}Content-Transfer-Encoding: {html_encoding}\n\n".encode(),
            html, f"\n--{boundary}--\n".encode()])

    def compose_by_stdlib(self, email: OutgoingEmail, date: datetime | None = None) -> bytes:
        message = EmailMessage(policy=HEADERS_UNFOLDED)
        message["From"] = self.sender_for(email.sender_name)
        message["To"] = email.to
        message["Subject"] = email.subject
        message["Date"] = date or utcnow()
        message["Message-ID"] = email.message_id
        if email.reply_to:
            message["Reply-To"] = email.reply_to
        if email.unsubscribe_url:
            message["List-Unsubscribe"] = f"<{email.unsubscribe_url}>"
            message["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
        message.set_content(email.text)
        if email.html is not None:
            message.add_alternative(email.html, subtype="html")
        return bytes(message)

    def _direct_headers(self, email: OutgoingEmail, date: datetime) -> str | None:
        """The header lines before Content-Type, or None when a value is outside the direct
        path (see the module's docstring)."""
        fields = [("To", email.to, _ADDR_SPEC), ("Subject", email.subject, _WORDS),
                  ("Message-ID", email.message_id, _MESSAGE_ID)]
        if email.reply_to:
            fields.append(("Reply-To", email.reply_to, _ADDR_SPEC))
        if email.unsubscribe_url:
            fields.append(("List-Unsubscribe", f"<{email.unsubscribe_url}>", _BRACKETED_URL))
        lines = [self._from_line_for(email.sender_name)]
        for name, value, pattern in fields:
            if (name == "Subject" and not value.isascii() and _UNICODE_WORDS.fullmatch(value)
                    and _ENCODED_WORD_START not in value):
                lines.append(f"Subject: {_encoded_words(value)}\n")
                lines.append(f"Date: {format_datetime(date)}\n")
                continue
            if (not pattern.fullmatch(value) or _ENCODED_WORD_START in value
                    or len(name) + 2 + len(value) > MAX_LINE):
                return None
            lines.append(f"{name}: {value}\n")
            if name == "Subject":
                lines.append(f"Date: {format_datetime(date)}\n")
        if email.unsubscribe_url:
            lines.append(_ONE_CLICK)
        return "".join(lines)


def _folded_from(sender: str | Address) -> str:
    from_line = EmailMessage(policy=HEADERS_UNFOLDED)
    from_line["From"] = sender
    (name, value), = from_line.raw_items()
    return HEADERS_UNFOLDED.fold_binary(name, value).decode("ascii")


def _encoded(text: str, avoid: str | None = None) -> tuple[str, bytes]:
    """A part's transfer encoding and body: 7bit when ASCII with lines of at most 998
    characters (and free of ``avoid``), else quoted-printable UTF-8."""
    lines = text.encode("utf-8").splitlines()
    body = b"\n".join(lines) + b"\n"  # what the standard library writes: \n line ends
    if (text.isascii() and max(map(len, lines), default=0) <= MAX_LINE
            and (avoid is None or avoid not in text)):
        return "7bit", body
    return "quoted-printable", binascii.b2a_qp(body)  # =XX for non-ASCII, blanks, "="; 76 wide


def _encoded_words(value: str) -> str:
    """A non-ASCII header value as RFC 2047 base64 words of whole characters, one per folded
    line: a reader joins adjacent words and drops the folding between them."""
    data, words, start = value.encode("utf-8"), [], 0
    while start < len(data):
        end = min(start + _WORD_BYTES, len(data))
        while end < len(data) and data[end] & 0xC0 == 0x80:  # not inside a character
            end -= 1
        words.append(binascii.b2a_base64(data[start:end], newline=False).decode())
        start = end
    return "\n ".join(f"=?utf-8?b?{word}?=" for word in words)


def _html_part(html: str, boundary: str) -> tuple[str, bytes]:
    """The HTML part's transfer encoding and body. Characters outside ASCII become character
    references (the HTML reads the same), so the part is usually 7bit and costs no encoding;
    one with a line longer than 998 characters goes base64 (quoted-printable costs several
    times more CPU for a 10 kB part)."""
    body = b"\n".join(html.encode("ascii", "xmlcharrefreplace").splitlines()) + b"\n"
    if max(map(len, body.split(b"\n"))) <= MAX_LINE and boundary.encode() not in body:
        return "7bit", body
    return "base64", base64.encodebytes(body)  # 76-character lines
