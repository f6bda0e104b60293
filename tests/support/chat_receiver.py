"""A Slack- or Teams-like incoming-webhook receiver on 127.0.0.1 for tests: answers each
post as its policy says (Slack answers `ok`, Teams `1`), and keeps every post with its path,
its parsed JSON and the instant it arrived (time.monotonic, for counting arrivals in a
window: never compared with a speed goal)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ChatReceiver", "Posted"]


@dataclass(frozen=True)
class Posted:
    number: int  # 1-based, in arrival order
    path: str
    message: Any  # the JSON posted
    arrived: float  # time.monotonic() at arrival
    answered: int


class ChatReceiver:
    def __init__(self, policy: Callable[[int], int] = lambda n: 200, *, answer: bytes = b"ok") -> None:
        self.policy = policy
        self.answer = answer
        self.received: list[Posted] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                arrived = time.monotonic()
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with receiver.lock:
                    number = len(receiver.received) + 1
                    status = receiver.policy(number)
                    receiver.received.append(Posted(number, self.path, json.loads(body), arrived, status))
                text = receiver.answer if status < 300 else b"invalid_payload"
                self.send_response(status)
                self.send_header("content-type", "text/plain")
                self.send_header("content-length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/services/T000/B000/XXXX") -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def posts(self, path: str | None = None) -> list[Posted]:
        with self.lock:
            return [p for p in self.received if path is None or p.path == path]

    def __enter__(self) -> ChatReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
