"""A local SMTP server (aiosmtpd) on the loopback address that keeps what it received, for
the email failover tests: each message as the bytes the client sent."""

from __future__ import annotations

import email
import socket
import threading
from email.message import Message

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session


class _Keep:
    def __init__(self, server: LocalSmtp):
        self.server = server

    async def handle_DATA(self, smtp: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        with self.server.lock:
            self.server.received.append((list(envelope.rcpt_tos), bytes(content)))
        return "250 Message accepted for delivery"


class LocalSmtp:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: list[tuple[list[str], bytes]] = []
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self._controller = Controller(_Keep(self), hostname="127.0.0.1", port=self.port)

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def __enter__(self) -> LocalSmtp:
        self._controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._controller.stop()

    def messages(self) -> list[Message]:
        with self.lock:
            return [email.message_from_bytes(raw) for _, raw in self.received]
