"""A fast local SES v2 endpoint for bench/deliver.py: answers SendEmail and counts.

    python -m bench.ses_endpoint --port PORT

moto is a faithful SES but far too slow to measure Tocsin's delivery rate against (it
would be the bottleneck), so the bench sends to this instead: one asyncio process, raw
HTTP/1.1 with keep-alive, that answers ``POST /v2/email/outbound-emails`` (boto3's
``sesv2.send_email``) with a unique JSON ``MessageId`` and remembers, per request, the
message's ``tenant``/``delivery`` tags (as Tocsin sets them) and the arrival time. It
checks nothing else: the bench measures the sender, not the provider.

The bench reads what arrived from the outside:
  GET  /bench/received   {"requests", "keys": {"tenant/delivery": count}, "first", "last"}
                         (first/last: arrival times in seconds, monotonic clock)
  POST /bench/reset      forget everything received so far
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence

SEND_PATH = b"/v2/email/outbound-emails"
MAX_HEAD = 64 * 1024  # bytes: a request head longer than this closes the connection


class Received:
    def __init__(self) -> None:
        self._prefix = os.urandom(6).hex()  # MessageIds stay unique across endpoint runs
        self._generation = 0  # and across resets
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.keys: Counter[str] = Counter()
        self.first: float | None = None  # monotonic seconds
        self.last: float | None = None
        self._generation += 1

    def record(self, body: bytes) -> str:
        now = time.monotonic()
        self.requests += 1
        if self.first is None:
            self.first = now
        self.last = now
        try:
            tags = {t["Name"]: t["Value"] for t in json.loads(body).get("EmailTags", ())}
        except (ValueError, KeyError, TypeError, AttributeError):
            tags = {}
        self.keys[f"{tags.get('tenant', '?')}/{tags.get('delivery', '?')}"] += 1
        return f"bench-{self._prefix}-{self._generation}-{self.requests:08d}"

    def summary(self) -> bytes:
        return json.dumps({"requests": self.requests, "keys": self.keys, "first": self.first,
                           "last": self.last}).encode()


def response(status: str, body: bytes, request_id: int) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"x-amzn-RequestId: bench-{request_id}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


class SesProtocol(asyncio.Protocol):
    def __init__(self, received: Received):
        self._received = received
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        # Several requests may arrive in one read (pipelining); answer each complete one.
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD and self._transport is not None:
                    self._transport.close()
                return
            head = bytes(self._buffer[:end])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(self._buffer) < end + 4 + length:
                return
            body = bytes(self._buffer[end + 4:end + 4 + length])
            del self._buffer[:end + 4 + length]
            self._answer(head.split(b"\r\n", 1)[0], body)

    def _answer(self, request_line: bytes, body: bytes) -> None:
        assert self._transport is not None
        parts = request_line.split(b" ")
        method, path = (parts[0], parts[1]) if len(parts) >= 2 else (b"", b"")
        if method == b"POST" and path == SEND_PATH:
            message_id = self._received.record(body)
            reply = response("200 OK", b'{"MessageId": "%s"}' % message_id.encode(),
                             self._received.requests)
        elif method == b"GET" and path == b"/bench/received":
            reply = response("200 OK", self._received.summary(), 0)
        elif method == b"POST" and path == b"/bench/reset":
            self._received.reset()
            reply = response("200 OK", b"{}", 0)
        else:
            reply = response("404 Not Found", b'{"message": "not served by the bench endpoint"}', 0)
        self._transport.write(reply)


async def serve(host: str, port: int) -> None:
    received = Received()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SesProtocol(received), host, port, backlog=1024)
    print(f"bench SES endpoint listening on http://{host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ses_endpoint",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
