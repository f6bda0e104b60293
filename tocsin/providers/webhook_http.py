"""The webhook adapter: resolve the endpoint's host, let the SSRF guard judge every address
(domain/delivery/webhooks.py) before any connection, then one signed POST (Standard
Webhooks, with the `standardwebhooks` package) to the address the guard allowed, no
redirect followed, the first kilobyte of the answer kept.

The connection goes to the address that was checked, never to the name (which a second
lookup could answer differently: DNS rebinding); the name still travels as the Host header
and, over TLS, as the SNI name the certificate is verified against.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import lru_cache
from urllib.parse import urlsplit, urlunsplit

import httpx
from standardwebhooks.webhooks import Webhook

from domain.delivery.states import ErrorClass
from domain.delivery.webhooks import (
    MAX_RESPONSE_BYTES,
    CallAnswer,
    DestinationRefused,
    check_destination,
    classify_webhook_answer,
    clip_response,
)

__all__ = ["PinnedDestination", "Resolver", "WebhookCall", "WebhookSender", "get_sender", "pin_destination",
           "post_pinned", "resolve", "signature_header"]

USER_AGENT = "Tocsin-Webhooks/1"

Resolver = Callable[[str, int], Sequence[str]]  # (host, port) -> every address it resolves to


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (both families), as text."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise DestinationRefused(f"{host} does not resolve: {e.strerror}") from None
    return [str(info[4][0]) for info in infos]


class PinnedDestination:
    """A URL rewritten to the address the SSRF guard allowed, with the name it was for (the
    Host header, and over TLS the SNI name the certificate is checked against)."""

    def __init__(self, url: str, address: str, host_header: str, sni: str | None):
        self.url, self.address, self.host_header, self.sni = url, address, host_header, sni


def pin_destination(url: str, resolver: Resolver, *, allow_private: bool) -> PinnedDestination:
    """Resolve ``url``'s host and let the guard judge every address before any connection;
    DestinationRefused otherwise. Shared by webhooks and the Slack and Teams adapter."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = check_destination(host, resolver(host, port), allow_private=allow_private)
    literal = f"[{address}]" if ":" in address else address
    pinned = urlunsplit((parts.scheme, f"{literal}:{port}", parts.path or "/", parts.query, ""))
    return PinnedDestination(pinned, address, parts.netloc.rpartition("@")[2],
                             host if parts.scheme == "https" else None)


def post_pinned(client: httpx.Client, url: str, headers: dict[str, str], sni: str | None, body: str,
                classify: Callable[[int], ErrorClass | None]) -> CallAnswer:
    """POST ``body`` to a pinned URL, keep the first MAX_RESPONSE_BYTES of the answer, and
    class it with ``classify``. Never raises for what the network does."""
    started = time.monotonic()
    extensions = {"sni_hostname": sni} if sni else {}

    def elapsed() -> int:
        return int((time.monotonic() - started) * 1000)

    try:
        with client.stream("POST", url, content=body.encode(), headers=headers,
                           extensions=extensions) as response:
            kept = b""
            for chunk in response.iter_bytes():
                kept += chunk
                if len(kept) >= MAX_RESPONSE_BYTES:
                    break
            error_class = classify(response.status_code)
            return CallAnswer(response.status_code, elapsed(), clip_response(kept),
                              None if error_class is None else f"HTTP {response.status_code}",
                              error_class)
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as e:
        # Nothing reached the receiver: safe to retry.
        return CallAnswer(None, elapsed(), None, f"{type(e).__name__}: {e}"[:500],
                          ErrorClass.TRANSIENT, sent=False)
    except httpx.HTTPError as e:
        # The request may have arrived (a read timeout, a connection closed mid-answer):
        # uncertain. A webhook repeats it with the same webhook-id, which the receiver drops.
        return CallAnswer(None, elapsed(), None, f"{type(e).__name__}: {e}"[:500] or "no answer",
                          ErrorClass.UNCERTAIN)


def signature_header(secrets: Sequence[str], webhook_id: str, timestamp: datetime, body: str) -> str:
    """The webhook-signature header: one `v1,<base64>` per secret, space-separated (during a
    rotation the receiver accepts whichever secret it holds)."""
    return " ".join(_signer(secret).sign(webhook_id, timestamp, body) for secret in secrets)


@lru_cache(maxsize=1024)
def _signer(secret: str) -> Webhook:
    """The signer of a secret, its key decoded once per process rather than once per call."""
    return Webhook(secret)


class WebhookCall:
    """One request, prepared: the URL to the checked address, and its headers."""

    def __init__(self, url: str, address: str, headers: dict[str, str], sni: str | None):
        self.url, self.address, self.headers, self.sni = url, address, headers, sni

    def sign(self, secrets: Sequence[str], timestamp: datetime, body: str) -> None:
        """(Re)sign with ``secrets``: those read in the transaction that marks the call, so a
        rotation committed before the call is in its signature."""
        self.headers["webhook-timestamp"] = str(int(timestamp.timestamp()))
        self.headers["webhook-signature"] = signature_header(secrets, self.headers["webhook-id"],
                                                             timestamp, body)


class WebhookSender:
    """Built once per process from the settings (get_sender), never at import time."""

    def __init__(self, *, allow_private: bool, timeout_seconds: float,
                 resolver: Resolver = resolve) -> None:
        self.allow_private = allow_private
        self.resolver = resolver
        self.timeout_seconds = timeout_seconds
        self._local = threading.local()
        self._lock = threading.Lock()
        self._clients: list[httpx.Client] = []

    def _new_client(self) -> httpx.Client:
        # No redirects (a 3xx could point the call where the guard would refuse), no
        # environment proxies, one timeout per phase.
        return httpx.Client(follow_redirects=False, trust_env=False,
                            timeout=httpx.Timeout(self.timeout_seconds),
                            headers={"user-agent": USER_AGENT})

    def prepare(self, url: str, webhook_id: str,
                judged: dict[str, PinnedDestination] | None = None) -> WebhookCall:
        """The call to make, after the guard allowed the address it will connect to;
        DestinationRefused otherwise (no connection has been attempted). Sign it before
        sending it. With ``judged``, the calls of one group to the same URL share one
        resolution and one verdict (made moments before their calls)."""
        destination = None if judged is None else judged.get(url)
        if destination is None:
            destination = pin_destination(url, self.resolver, allow_private=self.allow_private)
            if judged is not None:
                judged[url] = destination
        headers = {
            "host": destination.host_header,
            "content-type": "application/json",
            "webhook-id": webhook_id,
        }
        return WebhookCall(destination.url, destination.address, headers, destination.sni)

    def send(self, call: WebhookCall, body: str) -> CallAnswer:
        """POST the signed call's body; the answer classed. Never raises for what the network does."""
        if "webhook-signature" not in call.headers:
            raise ValueError("a webhook call is signed before it is sent")
        return post_pinned(self._client(), call.url, call.headers, call.sni, body, classify_webhook_answer)

    def _client(self) -> httpx.Client:
        """The calling thread's own client: one connection pool per sending thread, as each
        thread has one call in flight at a time (no pool lock shared between them)."""
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            client = self._new_client()
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()


@lru_cache(maxsize=4)
def get_sender(allow_private: bool, timeout_seconds: float) -> WebhookSender:
    return WebhookSender(allow_private=allow_private, timeout_seconds=timeout_seconds)
