"""The Slack and Teams adapter: an incoming-webhook URL's host resolved and judged by the SSRF
guard (domain/delivery/webhooks.py check_destination) before any connection, then one JSON
POST to the address the guard allowed, no redirect followed, the first kilobyte of the
answer kept. As for webhooks, the connection goes to the checked address, never to the name
again (DNS rebinding); the name travels as the Host header and the TLS SNI name."""

from __future__ import annotations

from functools import lru_cache

import httpx

from domain.delivery.channels import classify_http_answer
from domain.delivery.webhooks import CallAnswer
from tocsin.providers.webhook_http import Resolver, pin_destination, post_pinned, resolve

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
        destination = pin_destination(url, self.resolver, allow_private=self.allow_private)
        headers = {"host": destination.host_header, "content-type": "application/json"}
        return ChatCall(destination.url, headers, destination.sni)

    def send(self, call: ChatCall, body: str) -> CallAnswer:
        """POST the message; the answer classed. Never raises for what the network does."""
        return post_pinned(self.client, call.url, call.headers, call.sni, body, classify_http_answer)


@lru_cache(maxsize=4)
def get_chat_sender(allow_private: bool, timeout_seconds: float) -> ChatSender:
    return ChatSender(allow_private=allow_private, timeout_seconds=timeout_seconds)
