"""SES v2 SendEmail as one signed HTTPS request: the call a worker makes for every email.

boto3's generic client spends most of a send's CPU on its machinery (event hooks, parameter
validation, the endpoint rules, the request serialiser, the response parser): about twice
what the request itself costs (docs/benchmarks/deliver.md). For this one operation Tocsin
builds the request SES v2 documents (``POST /v2/email/outbound-emails``, a JSON body with
the raw message base64-encoded), has botocore's SigV4 signer sign it with credentials from
botocore's own chain (the settings' keys, or the environment, a profile, a container or
instance role, refreshed before they expire), and sends it on one urllib3 pool per process.
What a boto3 client does for the same call and Tocsin keeps:

- the endpoint: the boto3 client of the same settings resolves it once (region, partition,
  ``SES_ENDPOINT_URL``); proxies and CA bundle as botocore finds them (``HTTPS_PROXY``,
  ``NO_PROXY``, ``AWS_CA_BUNDLE``, else certifi's);
- exactly one HTTP request per call: no retry and no redirect here, as
  ``total_max_attempts=1`` asked of boto3 (a retry would resend an email whose answer was
  lost behind the back of the delivery state machine);
- errors read as botocore reads a REST-JSON answer (the code from ``x-amzn-ErrorType``, else
  the body's ``__type``), and classed as before: a connection that never opened is
  transient (nothing was sent); a request that left without an answer is uncertain.
"""

from __future__ import annotations

import base64
import os
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import msgspec
import urllib3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials
from botocore.httpsession import get_cert_path
from botocore.session import get_session
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    NewConnectionError,
    ProxyError,
    SSLError,
)

__all__ = ["SendAnswer", "SendFailure", "SesV2Api"]

SEND_PATH = "/v2/email/outbound-emails"
SIGNING_NAME = "ses"  # SES v2 signs as "ses"
CONNECT_TIMEOUT = 5.0  # seconds, as the boto3 clients are configured
# Nothing was sent: the connection (or its proxy, or its TLS handshake) never opened.
NEVER_CONNECTED = (NewConnectionError, ConnectTimeoutError, ProxyError, SSLError)


@dataclass(frozen=True)
class SendAnswer:
    message_id: str
    request_id: str | None


class SendFailure(Exception):
    """SES answered with an error (``status`` and ``code`` set), or no answer came: then
    ``sent`` says whether the request may have reached SES (False only when the connection
    never opened)."""

    def __init__(self, detail: str, *, status: int | None = None, code: str | None = None,
                 request_id: str | None = None, sent: bool = True):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.request_id = request_id
        self.sent = sent


class SesV2Api:
    """One process's SendEmail caller, shared by its threads (urllib3's pool is); the pool
    keeps up to ``pool_size`` connections, one per sending thread."""

    def __init__(self, endpoint_url: str, region: str, *, read_timeout: float,
                 access_key: str | None = None, secret_key: str | None = None, pool_size: int = 32):
        self._url = endpoint_url.rstrip("/") + SEND_PATH
        self._region = region
        if access_key:
            self._credentials: Any = Credentials(access_key, secret_key or "")
        else:
            self._credentials = get_session().get_credentials()  # None: found nowhere
        timeout = urllib3.Timeout(connect=CONNECT_TIMEOUT, read=read_timeout)
        options: dict[str, Any] = {"maxsize": pool_size, "timeout": timeout, "retries": False}
        if urlsplit(self._url).scheme == "https":  # the CA bundle boto3 would use
            options["ca_certs"] = os.environ.get("AWS_CA_BUNDLE") or get_cert_path(True)
        proxy = _proxy_for(self._url)
        self._pool: urllib3.PoolManager = (urllib3.ProxyManager(proxy, **options) if proxy
                                           else urllib3.PoolManager(**options))

    def send_raw(self, from_address: str, to: str, raw: bytes, tags: dict[str, str],
                 configuration_set: str | None = None) -> SendAnswer:
        """Send one raw MIME message; its MessageId, or SendFailure."""
        document: dict[str, Any] = {
            "FromEmailAddress": from_address,
            "Destination": {"ToAddresses": [to]},
            "Content": {"Raw": {"Data": base64.b64encode(raw).decode("ascii")}},
            "EmailTags": [{"Name": k, "Value": v} for k, v in tags.items()],
        }
        if configuration_set:
            document["ConfigurationSetName"] = configuration_set
        body = msgspec.json.encode(document)
        request = AWSRequest(method="POST", url=self._url, data=body,
                             headers={"Content-Type": "application/json"})
        SigV4Auth(self._frozen_credentials(), SIGNING_NAME, self._region).add_auth(request)
        try:
            response = self._pool.urlopen("POST", self._url, body=body, headers=dict(request.headers.items()),
                                          retries=False, redirect=False)
        except NEVER_CONNECTED as error:
            raise SendFailure(type(error).__name__, sent=False) from None
        except (HTTPError, OSError) as error:  # the request left; no answer came back
            raise SendFailure(type(error).__name__) from None
        request_id = response.headers.get("x-amzn-RequestId")
        answer = _json(response.data)
        if 200 <= response.status < 300:
            message_id = answer.get("MessageId")
            if not isinstance(message_id, str) or not message_id:
                raise SendFailure(f"HTTP {response.status} without a MessageId", request_id=request_id)
            return SendAnswer(message_id, request_id)
        code = _error_code(response.headers.get("x-amzn-ErrorType"), answer, response.status)
        message = answer.get("message", answer.get("Message", ""))
        raise SendFailure(f"{code}: {message}", status=response.status, code=code, request_id=request_id)

    def _frozen_credentials(self) -> ReadOnlyCredentials:
        if self._credentials is None:
            raise SendFailure("no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                              "or give the process a role", sent=False)
        # Refreshed before they expire, once for all threads (botocore locks the refresh).
        frozen: ReadOnlyCredentials = self._credentials.get_frozen_credentials()
        return frozen


def _json(data: bytes) -> dict[str, Any]:
    try:
        decoded = msgspec.json.decode(data) if data else {}
    except msgspec.DecodeError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def _error_code(error_type: str | None, answer: dict[str, Any], status: int) -> str:
    """As botocore's REST-JSON parser: the header, else the body's type, without its
    namespace (``...#Code``) or its documentation URL (``Code:http://...``)."""
    code = error_type or answer.get("__type") or answer.get("code") or answer.get("Code") or str(status)
    code = str(code).split(":", 1)[0]
    return code.rsplit("#", 1)[-1]


def _proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (HTTPS_PROXY, HTTP_PROXY, NO_PROXY)."""
    parts = urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return urllib.request.getproxies().get(parts.scheme)
