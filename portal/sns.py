"""Verifying SNS messages: the signing certificate is fetched from one of Amazon's SNS hosts
(cached per process) and the RSA signature checked over SNS's string to sign.

Only a message that passed domain.delivery.sns_messages.check_envelope (allowed topic, fresh, well formed,
certificate on an SNS host) reaches this module, so an attacker cannot make the portal
fetch anything by posting to the hook.
"""

from __future__ import annotations

import threading
import urllib.request
from collections import OrderedDict
from urllib.error import HTTPError

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from domain.delivery.sns_messages import Envelope, Untrusted, string_to_sign

__all__ = [
    "FETCH_TIMEOUT",
    "MAX_CACHED_CERTIFICATES",
    "MAX_CERT_BYTES",
    "ConfirmationFailed",
    "cached_certificate_urls",
    "verify_signature",
    "visit_subscribe_url",
]

FETCH_TIMEOUT = 5  # seconds
MAX_CERT_BYTES = 64 * 1024
MAX_CACHED_CERTIFICATES = 16  # SNS rotates its certificate a few times a year; a handful suffices

_lock = threading.Lock()
# Keyed by scheme, host and path (the envelope dropped any query): the same certificate
# asked for with ever-new query strings is fetched once, and the cache never grows past its bound.
_certificates: OrderedDict[str, rsa.RSAPublicKey] = OrderedDict()


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect would lead away from the host the envelope checked."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirects)


def _get(url: str, limit: int) -> bytes:
    with _opener.open(url, timeout=FETCH_TIMEOUT) as response:
        return bytes(response.read(limit))


def _public_key(url: str) -> rsa.RSAPublicKey:
    with _lock:
        key = _certificates.get(url)
        if key is not None:
            _certificates.move_to_end(url)
            return key
    try:
        public = x509.load_pem_x509_certificate(_get(url, MAX_CERT_BYTES)).public_key()
    except (OSError, ValueError):
        raise Untrusted("the SNS signing certificate could not be loaded") from None
    if not isinstance(public, rsa.RSAPublicKey):
        raise Untrusted("the SNS signing certificate is not an RSA certificate")
    with _lock:
        _certificates[url] = public
        while len(_certificates) > MAX_CACHED_CERTIFICATES:
            _certificates.popitem(last=False)
    return public


def cached_certificate_urls() -> list[str]:
    with _lock:
        return list(_certificates)


def verify_signature(message: dict[str, object], envelope: Envelope) -> None:
    """Raise Untrusted unless the message is signed by its (checked) certificate."""
    algorithm = hashes.SHA1() if envelope.digest == "sha1" else hashes.SHA256()
    try:
        _public_key(envelope.certificate_url).verify(
            envelope.signature, string_to_sign(message), padding.PKCS1v15(), algorithm)
    except InvalidSignature:
        raise Untrusted("the SNS signature does not match") from None


class ConfirmationFailed(Exception):
    """SNS did not answer the SubscribeURL: nothing is recorded, the message may come again."""


def visit_subscribe_url(url: str) -> None:
    """Confirm a subscription by visiting its (checked) SubscribeURL."""
    try:
        _get(url, MAX_CERT_BYTES)
    except HTTPError as error:
        raise ConfirmationFailed(f"SNS answered the SubscribeURL with {error.code}") from None
    except OSError as error:
        raise ConfirmationFailed(f"SNS could not be reached: {type(error).__name__}") from None
