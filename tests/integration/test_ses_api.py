"""The SendEmail request the workers make (tocsin/providers/ses_api.py), checked against a
real HTTP server that keeps what it receives: the request boto3 would send, signed as the
SigV4 specification says (computed here step by step, not by botocore); SES's errors read
as botocore reads them; nothing sent when the connection never opened, uncertain when
the answer never came."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from botocore.config import Config

from domain.delivery.states import ErrorClass
from tocsin.core.settings import load_settings
from tocsin.providers.ses import OutgoingEmail, ProviderError, SesMailer
from tocsin.providers.ses_api import SendFailure, SesV2Api, _proxy_for

ACCESS, SECRET, REGION = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "eu-west-1"


@dataclass
class Capture:
    """What one server received, and what it answers next."""

    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"x-amzn-RequestId": "req-1"})
    body: bytes = b'{"MessageId":"m-1"}'
    drop: bool = False  # read the request, then close without answering


@pytest.fixture
def server() -> Iterator[tuple[str, Capture]]:
    capture = Capture()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {k.lower(): v for k, v in self.headers.items()}
            capture.requests.append(("POST", self.path, headers, body))
            if capture.drop:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.send_response(capture.status)
            for name, value in capture.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(capture.body)))
            self.end_headers()
            self.wfile.write(capture.body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", capture
    finally:
        httpd.shutdown()
        httpd.server_close()


def _api(url: str) -> SesV2Api:
    return SesV2Api(url, REGION, read_timeout=5, access_key=ACCESS, secret_key=SECRET)


def _sigv4(method: str, path: str, headers: dict[str, str], body: bytes) -> str:
    """The Authorization header SigV4 gives this request (AWS's published algorithm, written
    out: canonical request, string to sign, derived key)."""
    amz_date = headers["x-amz-date"]
    signed = sorted(name for name in headers if name in ("host", "content-type") or name.startswith("x-amz-"))
    canonical = "\n".join([
        method, path, "",
        *(f"{name}:{' '.join(headers[name].split())}" for name in signed), "",
        ";".join(signed), hashlib.sha256(body).hexdigest(),
    ])
    scope = f"{amz_date[:8]}/{REGION}/ses/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{SECRET}".encode()
    for part in (amz_date[:8], REGION, "ses", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return (f"AWS4-HMAC-SHA256 Credential={ACCESS}/{scope}, SignedHeaders={';'.join(signed)}, "
            f"Signature={signature}")


def test_the_request_is_the_one_boto3_sends_and_its_signature_is_sigv4s(server: tuple[str, Capture]) -> None:
    url, capture = server
    raw = "From: a@tocsin.example\r\nSubject: Zoë\r\n\r\nbody\r\n".encode()
    tags = {"tenant": "acme", "delivery": "7"}
    answer = _api(url).send_raw("a@tocsin.example", "b@example.com", raw, tags, "tocsin-events")
    assert (answer.message_id, answer.request_id) == ("m-1", "req-1")
    client: Any = boto3.client("sesv2", region_name=REGION, endpoint_url=url, aws_access_key_id=ACCESS,
                               aws_secret_access_key=SECRET, config=Config(retries={"total_max_attempts": 1}))
    client.send_email(FromEmailAddress="a@tocsin.example", Destination={"ToAddresses": ["b@example.com"]},
                      Content={"Raw": {"Data": raw}}, ConfigurationSetName="tocsin-events",
                      EmailTags=[{"Name": k, "Value": v} for k, v in tags.items()])
    (method, path, headers, body), (b_method, b_path, b_headers, b_body) = capture.requests
    assert (method, path) == (b_method, b_path) == ("POST", "/v2/email/outbound-emails")
    assert json.loads(body) == json.loads(b_body)  # the same document, field for field
    assert base64.b64decode(json.loads(body)["Content"]["Raw"]["Data"]) == raw
    assert headers["content-type"] == b_headers["content-type"] == "application/json"
    assert headers["authorization"] == _sigv4(method, path, headers, body)
    assert b_headers["authorization"].split("Signature=")[0].startswith(
        f"AWS4-HMAC-SHA256 Credential={ACCESS}/{headers['x-amz-date'][:8]}/{REGION}/ses/aws4_request")


@pytest.mark.parametrize(("status", "headers", "body", "code", "message"), [
    (400, {"x-amzn-ErrorType": "MessageRejected:http://internal.amazon.com/coral/com.amazonaws.sesv2/"},
     b'{"message":"Email address is not verified."}', "MessageRejected", "Email address is not verified."),
    (429, {}, b'{"__type":"com.amazonaws.sesv2#TooManyRequestsException","Message":"slow down"}',
     "TooManyRequestsException", "slow down"),
    (503, {}, b"<html>Service Unavailable</html>", "503", ""),
])
def test_an_error_answer_is_read_as_botocore_reads_it(server: tuple[str, Capture], status: int,
                                                      headers: dict[str, str], body: bytes, code: str,
                                                      message: str) -> None:
    url, capture = server
    capture.status, capture.body = status, body
    capture.headers = {**headers, "x-amzn-RequestId": "req-e"}
    with pytest.raises(SendFailure) as failure:
        _api(url).send_raw("a@tocsin.example", "b@example.com", b"x", {})
    assert (failure.value.status, failure.value.code, failure.value.request_id) == (status, code, "req-e")
    assert str(failure.value) == f"{code}: {message}"


def test_the_mailer_classes_ses_errors_and_lost_answers_as_before(server: tuple[str, Capture]) -> None:
    url, capture = server
    mailer = SesMailer(replace(load_settings(), ses_endpoint_url=url))
    email = OutgoingEmail("<d.1@tocsin.example>", "b@example.com", "Hello", "Body", {"tenant": "t"})
    capture.status, capture.headers = 400, {"x-amzn-ErrorType": "MessageRejected"}
    capture.body = b'{"message":"no"}'
    with pytest.raises(ProviderError) as rejected:
        mailer.send(email)
    assert (rejected.value.error_class, rejected.value.code, rejected.value.http_status) == (
        ErrorClass.PERMANENT, "MessageRejected", 400)
    capture.status, capture.headers = 400, {"x-amzn-ErrorType": "TooManyRequestsException"}
    with pytest.raises(ProviderError) as throttled:
        mailer.send(email)
    assert throttled.value.error_class is ErrorClass.TRANSIENT
    capture.status, capture.headers, capture.body = 200, {}, b"{}"  # answered, but not with an id
    with pytest.raises(ProviderError) as unreadable:
        mailer.send(email)
    assert unreadable.value.error_class is ErrorClass.UNCERTAIN
    capture.drop = True  # the request arrived; its answer never came back
    with pytest.raises(ProviderError) as dropped:
        mailer.send(email)
    assert dropped.value.error_class is ErrorClass.UNCERTAIN
    assert len(capture.requests) == 4  # one request per call: never retried behind the state machine


def test_a_connection_that_never_opens_sent_nothing() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mailer = SesMailer(replace(load_settings(), ses_endpoint_url=f"http://127.0.0.1:{port}"))
    with pytest.raises(ProviderError) as refused:
        mailer.send(OutgoingEmail("<d.1@tocsin.example>", "b@example.com", "Hello", "Body", {}))
    assert refused.value.error_class is ErrorClass.TRANSIENT
    assert "NewConnectionError" in str(refused.value)


def test_the_read_timeout_reaches_the_pool_and_the_environments_proxy_and_ca_bundle_are_honoured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = replace(load_settings(), ses_endpoint_url="http://127.0.0.1:1", ses_read_timeout_seconds=300.0)
    api = SesMailer(settings).api
    assert api._pool.connection_pool_kw["timeout"].read_timeout == 300.0
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,.corp.example")
    assert _proxy_for("https://email.eu-west-1.amazonaws.com/v2/email/outbound-emails") == "http://proxy.internal:3128"
    assert _proxy_for("https://ses.corp.example/v2/email/outbound-emails") is None
    monkeypatch.setenv("AWS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")  # a company's own CA
    real = SesV2Api("https://email.eu-west-1.amazonaws.com", REGION, read_timeout=5, access_key=ACCESS,
                    secret_key=SECRET)
    assert real._pool.connection_pool_kw["ca_certs"] == "/etc/ssl/certs/ca-certificates.crt"
