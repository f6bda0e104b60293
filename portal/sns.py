"""Verifying SNS messages: the signing certificate is fetched from a trusted address
(cached per process) and the RSA signature checked over SNS's string to sign."""

from __future__ import annotations

import base64
import binascii
import threading
import urllib.request
from datetime import datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from domain.sns import Untrusted, check_envelope, string_to_sign

FETCH_TIMEOUT = 5  # seconds
MAX_CERT_BYTES = 64 * 1024

_lock = threading.Lock()
_certificates: dict[str, rsa.RSAPublicKey] = {}


def _public_key(url: str) -> rsa.RSAPublicKey:
    with _lock:
        key = _certificates.get(url)
    if key is not None:
        return key
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as response:
            pem = response.read(MAX_CERT_BYTES)
        public = x509.load_pem_x509_certificate(pem).public_key()
    except (OSError, ValueError):
        raise Untrusted("the SNS signing certificate could not be loaded") from None
    if not isinstance(public, rsa.RSAPublicKey):
        raise Untrusted("the SNS signing certificate is not an RSA certificate")
    with _lock:
        _certificates[url] = public
    return public


def verify_sns_message(message: dict[str, object], trusted_url: str, now: datetime) -> None:
    """Raise Untrusted unless the message is signed by a certificate from a trusted SNS
    address, and recent."""
    digest = check_envelope(message, trusted_url, now)
    url = str(message.get("SigningCertURL") or message.get("SigningCertUrl"))
    try:
        signature = base64.b64decode(str(message["Signature"]), validate=True)
    except (binascii.Error, ValueError):
        raise Untrusted("malformed SNS signature") from None
    algorithm = hashes.SHA1() if digest == "sha1" else hashes.SHA256()
    try:
        _public_key(url).verify(signature, string_to_sign(message), padding.PKCS1v15(), algorithm)
    except InvalidSignature:
        raise Untrusted("the SNS signature does not match") from None


def confirm_subscription(message: dict[str, object], trusted_url: str) -> None:
    """Visit the SubscribeURL of a verified SubscriptionConfirmation."""
    url = message.get("SubscribeURL")
    if not isinstance(url, str):
        raise Untrusted("subscription confirmation without a SubscribeURL")
    # check_envelope matched the URL against the trusted pattern before we got here.
    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as response:
        response.read(MAX_CERT_BYTES)
