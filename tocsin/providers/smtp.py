"""The failover email provider: plain SMTP (SMTP_URL), with STARTTLS whenever the server
offers it, sending the very bytes the SES adapter would have sent (same Message-ID).

``smtp://user:password@host:587`` upgrades with STARTTLS when the server offers it and logs
in when a user is given; ``smtps://host:465`` speaks TLS from the first byte. Built once per
process from the settings, on first use.
"""

from __future__ import annotations

import re
import smtplib
import ssl
import threading
from dataclasses import dataclass
from email.utils import parseaddr
from urllib.parse import unquote, urlsplit

from domain.delivery.states import ErrorClass
from tocsin.core import runtime
from tocsin.core.settings import ConfigError, Settings
from tocsin.providers.mime_message import MessageComposer
from tocsin.providers.ses import Accepted, OutgoingEmail, ProviderError

__all__ = ["SmtpEndpoint", "SmtpMailer", "get_smtp_mailer", "parse_smtp_url", "set_smtp_mailer"]

_BARE_LF = re.compile(rb"\r?\n")
SMTP_TIMEOUT = 30.0  # seconds one SMTP conversation may wait for the server at each step


@dataclass(frozen=True)
class SmtpEndpoint:
    host: str
    port: int
    implicit_tls: bool  # smtps://: TLS from the first byte
    user: str | None
    password: str | None

    def __repr__(self) -> str:  # never the password in a log line
        return f"SmtpEndpoint({'smtps' if self.implicit_tls else 'smtp'}://{self.host}:{self.port})"


def parse_smtp_url(url: str) -> SmtpEndpoint:
    parts = urlsplit(url)
    if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
        raise ConfigError("SMTP_URL must look like smtp://user:password@host:587 or smtps://host:465")
    try:
        port = parts.port or (465 if parts.scheme == "smtps" else 587)
    except ValueError:
        raise ConfigError("SMTP_URL has a port that is not a number") from None
    return SmtpEndpoint(parts.hostname, port, parts.scheme == "smtps",
                        unquote(parts.username) if parts.username else None,
                        unquote(parts.password) if parts.password else None)


class SmtpMailer:
    """One SMTP conversation per email: failover is rare, and a connection kept open would
    have to survive long idle periods at the relay."""

    def __init__(self, settings: Settings):
        if not settings.smtp_url:
            raise ConfigError("email failover needs SMTP_URL")
        self.endpoint = parse_smtp_url(settings.smtp_url)
        self._from = parseaddr(settings.mail_from)[1]
        self._composer = MessageComposer(settings.mail_from)

    def send(self, email: OutgoingEmail) -> Accepted:
        # SES takes the composed bytes' bare LF line ends; SMTP's DATA needs CRLF (RFC 5321),
        # which smtplib adds to a str message but not to bytes.
        raw = _BARE_LF.sub(b"\r\n", self._composer.compose(email))
        e = self.endpoint
        context = ssl.create_default_context()
        try:
            client = (smtplib.SMTP_SSL(e.host, e.port, timeout=SMTP_TIMEOUT, context=context)
                      if e.implicit_tls else smtplib.SMTP(e.host, e.port, timeout=SMTP_TIMEOUT))
        except (OSError, smtplib.SMTPException) as error:  # never connected: nothing was sent
            raise ProviderError(ErrorClass.TRANSIENT, f"SMTP connect: {type(error).__name__}") from None
        try:
            with client:
                client.ehlo()
                if not e.implicit_tls and client.has_extn("starttls"):
                    client.starttls(context=context)
                    client.ehlo()
                if e.user:
                    client.login(e.user, e.password or "")
                refused = client.sendmail(self._from, [email.to], raw)
        except smtplib.SMTPResponseException as error:
            # 4xx: try again later; 5xx: this message will not be taken.
            error_class = ErrorClass.PERMANENT if error.smtp_code >= 500 else ErrorClass.TRANSIENT
            raise ProviderError(error_class, f"SMTP {error.smtp_code}") from None
        except smtplib.SMTPRecipientsRefused:
            raise ProviderError(ErrorClass.PERMANENT, "SMTP refused the recipient") from None
        except (smtplib.SMTPServerDisconnected, TimeoutError) as error:
            # The conversation broke off: the server may have queued the message already.
            raise ProviderError(ErrorClass.UNCERTAIN, f"SMTP {type(error).__name__}") from None
        except (OSError, smtplib.SMTPException) as error:
            raise ProviderError(ErrorClass.TRANSIENT, f"SMTP {type(error).__name__}") from None
        if refused:
            raise ProviderError(ErrorClass.PERMANENT, "SMTP refused the recipient")
        # The relay names no id of its own that we could read back: the Message-ID is ours.
        return Accepted(f"smtp:{email.message_id}", None)


_lock = threading.Lock()
_mailer: SmtpMailer | None = None


def get_smtp_mailer() -> SmtpMailer | None:
    """The process's SMTP mailer, or None when SMTP_URL is unset (no failover possible)."""
    global _mailer
    with _lock:
        if _mailer is None and runtime.settings().smtp_url:
            _mailer = SmtpMailer(runtime.settings())
        return _mailer


def set_smtp_mailer(mailer: SmtpMailer | None) -> None:
    """Swap the process's SMTP mailer (tests point it at their own server)."""
    global _mailer
    with _lock:
        _mailer = mailer
