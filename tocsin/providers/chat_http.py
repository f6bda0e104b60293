"""The Slack and Teams adapter: an incoming-webhook URL's host resolved and judged by the SSRF
guard (domain/delivery/webhooks.py check_destination) before any connection, then one JSON
POST to the address the guard allowed, no redirect followed, the first kilobyte of the
answer kept. As for webhooks, the connection goes to the checked address, never to the name
again (DNS rebinding); the name travels as the Host header and the TLS SNI name."""

from __future__ import annotations

import time
from functools import lru_cache
from urllib.parse import urlsplit, urlunsplit

import httpx

from domain.delivery.channels import classify_http_answer
from domain.delivery.states import ErrorClass
from domain.delivery.webhooks import MAX_RESPONSE_BYTES, CallAnswer, check_destination, clip_response
from tocsin.providers.webhook_http import Resolver, resolve

__all__ = ["ChatCall", "ChatSender", "get_chat_sender"]

USER_AGENT = "Tocsin-Chat/1"


class ChatCall:
    """One request, prepared: the URL to the checked address, and its headers."""

    def __init__(self, url: str, headers: dict[str, str], sni: str | None):
        self.url, self.headers, self.sni = url, headers, sni


class ChatSender:
    """Built once per process from the settings (get_chat_sender), never at import time."""

    def __init__(self, *, allow_private: bool, timeout_seconds: float, resolver: Resolver = resolve) -> None:
        self.allow_private = allow_private
        self.resolver = resolver
        self.client = httpx.Client(follow_redirects=False, trust_env=False,
                                   timeout=httpx.Timeout(timeout_seconds),
                                   headers={"user-agent": USER_AGENT})

    def prepare(self, url: str) -> ChatCall:
        """The call to make, after the guard allowed the address it will connect to;
        DestinationRefused otherwise (no connection has been attempted)."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        address = check_destination(host, self.resolver(host, port), allow_private=self.allow_private)
        literal = f"[{address}]" if ":" in address else address
        pinned = urlunsplit((parts.scheme, f"{literal}:{port}", parts.path or "/", parts.query, ""))
        headers = {"host": parts.netloc.rpartition("@")[2], "content-type": "application/json"}
        return ChatCall(pinned, headers, host if parts.scheme == "https" else None)

    def send(self, call: ChatCall, body: str) -> CallAnswer:
        """POST the message; the answer classed. Never raises for what the network does."""
        started = time.monotonic()
        extensions = {"sni_hostname": call.sni} if call.sni else {}

        def elapsed() -> int:
            return int((time.monotonic() - started) * 1000)

        try:
            with self.client.stream("POST", call.url, content=body.encode(), headers=call.headers,
                                    extensions=extensions) as response:
                kept = b""
                for chunk in response.iter_bytes():
                    kept += chunk
                    if len(kept) >= MAX_RESPONSE_BYTES:
                        break
                error_class = classify_http_answer(response.status_code)
                return CallAnswer(response.status_code, elapsed(), clip_response(kept),
                                  None if error_class is None else f"HTTP {response.status_code}",
                                  error_class)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as e:
            return CallAnswer(None, elapsed(), None, f"{type(e).__name__}: {e}"[:500],
                              ErrorClass.TRANSIENT, sent=False)
        except httpx.HTTPError as e:
            # The message may have been posted (a read timeout, a connection closed mid-answer).
            return CallAnswer(None, elapsed(), None, f"{type(e).__name__}: {e}"[:500] or "no answer",
                              ErrorClass.UNCERTAIN)


@lru_cache(maxsize=4)
def get_chat_sender(allow_private: bool, timeout_seconds: float) -> ChatSender:
    return ChatSender(allow_private=allow_private, timeout_seconds=timeout_seconds)
