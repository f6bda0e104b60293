"""A webhook receiver on 127.0.0.1 for tests: answers each call as its policy says (a status,
a hang past the sender's timeout), keeps every request, and verifies every signature with
the Standard Webhooks reference code (the `standardwebhooks` package) against the secrets
it holds, so a test can assert that no call ever arrived unverifiable."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

__all__ = ["Received", "WebhookReceiver"]

Action = int | str  # an HTTP status to answer, or "hang" (no answer for hang_seconds)


@dataclass(frozen=True)
class Received:
    number: int  # 1-based, in arrival order
    webhook_id: str
    headers: dict[str, str]
    body: bytes
    verified: bool  # the signature verified with one of the receiver's secrets
    answered: Action


class WebhookReceiver:
    def __init__(self, policy: Callable[[int], Action] = lambda n: 200, *, secrets: list[str] | None = None,
                 hang_seconds: float = 3.0) -> None:
        self.policy = policy
        self.secrets = list(secrets or [])
        self.hang_seconds = hang_seconds
        self.received: list[Received] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.lock:
                    number = len(receiver.received) + 1
                    action = receiver.policy(number)
                    receiver.received.append(Received(number, headers.get("webhook-id", ""), headers,
                                                      body, receiver._verified(headers, body), action))
                if action == "hang":
                    time.sleep(receiver.hang_seconds)
                    return
                self.send_response(int(action))
                self.send_header("content-type", "text/plain")
                answer = b"ok" if int(action) < 300 else b"x" * 5000  # longer than the kept 1 kB
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/tocsin"

    def _verified(self, headers: dict[str, str], body: bytes) -> bool:
        for secret in self.secrets:
            try:
                Webhook(secret).verify(body, headers)
                return True
            except WebhookVerificationError:
                continue
        return False

    def calls(self) -> list[Received]:
        with self.lock:
            return list(self.received)

    def __enter__(self) -> WebhookReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
