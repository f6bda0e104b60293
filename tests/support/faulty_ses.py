"""A fault-injecting HTTP endpoint in front of the local SES endpoint.

Every request is forwarded to the real local endpoint, except that SendEmail requests go
through a policy that can fail them (an HTTP 503 before forwarding: nothing sent), reject
them for good (SES's 400 MessageRejected, nothing sent), answer that sending is paused
(400 SendingPausedException, nothing sent), or drop
the answer (forwarded, accepted by SES, then the connection closed without a response:
the sender cannot know), or hold the answer (forwarded and accepted, the response kept back
until ``release()`` or ``answer_held()``, so a test can kill, freeze or cut off the sender
at a known point and know exactly which calls were in flight). Every SendEmail is logged
with its arrival time, its fate and the delivery it carries (its SES tags).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

Fate = Literal["pass", "fail", "reject", "paused", "drop", "hold"]
SEND_PATH = "/v2/email/outbound-emails"


@dataclass
class SendRecord:
    at: float  # time.monotonic() when the request arrived
    fate: Fate
    tenant: str | None = None  # the `tenant` and `delivery` SES tags of the message
    delivery: int | None = None
    answered: bool = False  # the response has been written back (or the request was refused)
    configuration_set: str | None = None  # the ConfigurationSetName the request named
    # For a held send: the event that answers it, the one current when the request arrived
    # (answer_held answers every send held by then, even one still being forwarded).
    answer: threading.Event | None = None


class FaultySes:
    def __init__(self, upstream: str, policy: Callable[[int], Fate] = lambda n: "pass",
                 delay: float = 0.0):
        self.upstream = upstream.rstrip("/")
        self.policy = policy  # called with the 1-based number of the SendEmail request
        self.delay = delay  # seconds each SendEmail takes before it is forwarded
        self.sends: list[SendRecord] = []
        self.released = threading.Event()  # set: nothing is held any more
        self._held = threading.Event()  # set to answer the sends held until now
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FaultySes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def release(self) -> None:
        """Answer every held send, and stop holding."""
        self.released.set()
        self.answer_held()

    def answer_held(self) -> None:
        """Answer the sends held now; sends arriving later are held again if the policy says
        so."""
        with self._lock:
            held, self._held = self._held, threading.Event()
        held.set()

    def count(self, fate: Fate | None = None) -> int:
        with self._lock:
            return sum(1 for s in self.sends if fate is None or s.fate == fate)

    def held_now(self, tenant: str) -> set[int]:
        """This tenant's deliveries whose call SES has accepted and whose answer is held:
        the calls in flight, exactly."""
        with self._lock:
            return {s.delivery for s in self.sends if s.fate == "hold" and not s.answered
                    and s.tenant == tenant and s.delivery is not None}

    def _fate(self, body: bytes | None) -> SendRecord:
        request = json.loads(body or b"{}")
        tags = {t.get("Name"): t.get("Value") for t in request.get("EmailTags", [])}
        delivery = tags.get("delivery")
        with self._lock:
            record = SendRecord(time.monotonic(), self.policy(len(self.sends) + 1), tags.get("tenant"),
                                int(delivery) if delivery else None,
                                configuration_set=request.get("ConfigurationSetName"))
            if record.fate == "hold":
                record.answer = self._held
            self.sends.append(record)
            return record

    def _answered(self, record: SendRecord | None) -> None:
        if record is not None:
            with self._lock:
                record.answered = True

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _forward(self, body: bytes | None) -> tuple[int, list[tuple[str, str]], bytes]:
                skip = ("host", "content-length")
                headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
                request = urllib.request.Request(f"{outer.upstream}{self.path}", data=body,
                                                 headers=headers, method=self.command)
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        return response.status, list(response.headers.items()), response.read()
                except urllib.error.HTTPError as error:
                    return error.code, list(error.headers.items()), error.read()

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                fate: Fate = "pass"
                record = None
                if self.command == "POST" and self.path.startswith(SEND_PATH):
                    record = outer._fate(body)
                    fate = record.fate
                    if outer.delay:
                        time.sleep(outer.delay)
                if fate in ("fail", "reject", "paused"):
                    status, error_type, payload = {
                        "fail": (503, "ServiceUnavailable", b'{"message":"injected: service unavailable"}'),
                        "reject": (400, "MessageRejected",
                                   b'{"message":"injected: Email address is not verified."}'),
                        "paused": (400, "SendingPausedException",
                                   b'{"message":"injected: sending paused for this account"}'),
                    }[fate]
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("x-amzn-ErrorType", error_type)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    outer._answered(record)
                    return
                status, headers, payload = self._forward(body)
                if fate == "drop":  # SES has it; the sender never hears
                    self.close_connection = True
                    return
                if fate == "hold" and not outer.released.is_set() and record is not None:
                    assert record.answer is not None
                    record.answer.wait(600)
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in ("content-length", "transfer-encoding", "connection",
                                            "server", "date"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                    self.wfile.flush()
                finally:
                    outer._answered(record)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        return Handler
