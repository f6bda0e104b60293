"""SNS messages signed the way Amazon signs them, by a key the test owns, with the
signing certificate (and a SubscribeURL) served from a local HTTP endpoint, which the hook
trusts through SNS_TEST_CERT_ORIGIN. Every request that endpoint receives is recorded, so a
test can show the hook fetched nothing."""

from __future__ import annotations

import base64
import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from domain.delivery.sns_messages import string_to_sign

ATTACKER_TOPIC = "arn:aws:sns:eu-west-1:666666666666:harmless-looking-topic"


def _certificate(key: rsa.RSAPrivateKey) -> bytes:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.test")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=1))
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


class SnsSigner:
    def __init__(self, topic: str) -> None:
        self.topic = topic  # the topic messages come from unless a test names another
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.pem = _certificate(self.key)
        self.confirmations: list[str] = []
        self.requests: list[str] = []  # every path asked for, certificates included
        signer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                signer.requests.append(self.path)
                if self.path.startswith("/?Action=ConfirmSubscription"):
                    signer.confirmations.append(self.path)
                    body = b"<ConfirmSubscriptionResponse/>"
                elif self.path == "/cert.pem":
                    body = signer.pem
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def sign(self, message: dict[str, object], key: rsa.RSAPrivateKey | None = None) -> dict[str, object]:
        message = {"SignatureVersion": "2", "SigningCertURL": f"{self.base}/cert.pem", **message}
        signature = (key or self.key).sign(string_to_sign(message), padding.PKCS1v15(), hashes.SHA256())
        return {**message, "Signature": base64.b64encode(signature).decode()}

    def notification(self, payload: dict[str, object], *, at: datetime | None = None,
                     message_id: str | None = None, topic: str | None = None) -> dict[str, object]:
        return self.sign({
            "Type": "Notification",
            "MessageId": message_id or str(uuid.uuid4()),
            "TopicArn": topic or self.topic,
            "Message": json.dumps(payload),
            "Timestamp": (at or datetime.now(UTC)).isoformat().replace("+00:00", "Z"),
        })

    def subscribe_path(self, topic: str | None, token: str) -> str:
        query = urlencode({"Action": "ConfirmSubscription", "TopicArn": topic or self.topic,
                           "Token": token})
        return f"/?{query}"

    def subscription(self, topic: str | None = None) -> dict[str, object]:
        token = f"token-{uuid.uuid4().hex}"  # each confirmation token is confirmed once, ever
        return self.sign({
            "Type": "SubscriptionConfirmation",
            "MessageId": str(uuid.uuid4()),
            "TopicArn": topic or self.topic,
            "Token": token,
            "Message": "You have chosen to subscribe to the topic.",
            "SubscribeURL": f"{self.base}{self.subscribe_path(topic, token)}",
            "Timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        })


def ses_event(event_type: str, tenant: str, delivery_id: int, message_id: str,
              **extra: object) -> dict[str, object]:
    """An SES event-publishing record as SES puts it in the SNS Message."""
    return {
        "eventType": event_type,
        "mail": {
            "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "messageId": message_id,
            "tags": {"tenant": [tenant], "delivery": [str(delivery_id)]},
        },
        **extra,
    }
