"""The email provider adapter: AWS SES v2 (or the local endpoint in dev).

Each email is one SendEmail request built and signed by tocsin/providers/ses_api.py; the
boto3 client of the same settings resolves the endpoint and registers the local sender.
Built once per process from the settings, on first use, never at import time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from email.utils import parseaddr
from typing import TYPE_CHECKING, Protocol

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from domain.delivery.states import ErrorClass, classify_provider_error
from tocsin.core import runtime
from tocsin.core.settings import Settings
from tocsin.providers.mime_message import MessageComposer
from tocsin.providers.ses_api import SendFailure, SesV2Api

if TYPE_CHECKING:
    from mypy_boto3_sesv2 import SESV2Client

__all__ = [
    "Accepted",
    "Mailer",
    "OutgoingEmail",
    "ProviderError",
    "SesMailer",
    "aws_client",
    "aws_keys",
    "get_mailer",
    "set_mailer",
]


@dataclass(frozen=True)
class OutgoingEmail:
    message_id: str  # deterministic per delivery, so a resend is recognisably the same message
    to: str
    subject: str
    text: str
    tags: dict[str, str]
    unsubscribe_url: str | None = None  # List-Unsubscribe, with RFC 8058 one-click POST
    html: str | None = None  # with it, multipart/alternative: text/plain then text/html
    reply_to: str | None = None  # the tenant's brand's reply-to address (Reply-To)
    sender_name: str | None = None  # the tenant's brand's sender name: From is "Name <address>"


@dataclass(frozen=True)
class Accepted:
    provider_message_id: str
    request_id: str | None


class ProviderError(Exception):
    def __init__(self, error_class: ErrorClass, detail: str, request_id: str | None = None,
                 code: str | None = None, http_status: int | None = None):
        super().__init__(detail)
        self.error_class = error_class
        self.request_id = request_id
        self.code = code  # the provider's error code, when it answered one (email failover reads it)
        self.http_status = http_status


class Mailer(Protocol):
    def send(self, email: OutgoingEmail) -> Accepted: ...


def aws_keys(settings: Settings) -> tuple[str | None, str | None]:
    """The access key and secret the settings give; none: botocore's credential chain (a
    profile, a container or instance role)."""
    if settings.aws_access_key_id:
        return settings.aws_access_key_id, settings.aws_secret_access_key
    if settings.ses_endpoint_url:  # the local endpoint accepts any credentials
        return "local", "local"
    return None, None


def aws_client(settings: Settings, service: str) -> object:
    access_key, secret_key = aws_keys(settings)
    credentials = {} if access_key is None else {"aws_access_key_id": access_key,
                                                 "aws_secret_access_key": secret_key}
    return boto3.client(  # type: ignore[call-overload]
        service,
        region_name=settings.aws_region,
        endpoint_url=settings.ses_endpoint_url,
        # Exactly one HTTP request per call: a retry inside botocore would resend a message
        # whose answer was lost, behind the back of the delivery state machine.
        config=Config(connect_timeout=5, read_timeout=settings.ses_read_timeout_seconds,
                      retries={"mode": "standard", "total_max_attempts": 1}),
        **credentials,
    )


class SesMailer:
    def __init__(self, settings: Settings):
        self._client: SESV2Client = aws_client(settings, "sesv2")  # type: ignore[assignment]
        access_key, secret_key = aws_keys(settings)
        # The SendEmail caller; bench/deliver.py's provider ceiling calls it bare.
        self.api = SesV2Api(self._client.meta.endpoint_url, self._client.meta.region_name,
                             read_timeout=settings.ses_read_timeout_seconds,
                             access_key=access_key, secret_key=secret_key)
        self._from = settings.mail_from
        self._composer = MessageComposer(settings.mail_from)
        # Named on every send when set: its event destination is what settles an unknown
        # outcome as accepted instead of resending it.
        self._configuration_set = settings.ses_configuration_set or None

    def compose(self, email: OutgoingEmail) -> bytes:
        return self._composer.compose(email)

    def send(self, email: OutgoingEmail) -> Accepted:
        try:
            answer = self.api.send_raw(self._from, email.to, self.compose(email), email.tags,
                                        self._configuration_set)
        except SendFailure as failure:
            if failure.status is not None:  # SES answered: its error says whether to retry
                error_class = classify_provider_error(failure.code, failure.status)
                raise ProviderError(error_class, str(failure), failure.request_id,
                                    code=failure.code, http_status=failure.status) from None
            # Never connected: nothing was sent. Otherwise the request left and no answer came.
            raise ProviderError(ErrorClass.UNCERTAIN if failure.sent else ErrorClass.TRANSIENT,
                                str(failure), failure.request_id) from None
        return Accepted(answer.message_id, answer.request_id)

    def ensure_sender_identity(self) -> None:
        """Register the sender with the local endpoint (real SES identities are verified
        by an operator in the AWS console, never by Tocsin)."""
        address = parseaddr(self._from)[1]
        try:
            self._client.create_email_identity(EmailIdentity=address)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "AlreadyExistsException":
                raise


_lock = threading.Lock()
_mailer: Mailer | None = None


def get_mailer() -> Mailer:
    global _mailer
    with _lock:
        if _mailer is None:
            _mailer = SesMailer(runtime.settings())
        return _mailer


def set_mailer(mailer: Mailer | None) -> None:
    """Swap the process mailer (tests inject a fault-injecting provider here)."""
    global _mailer
    with _lock:
        _mailer = mailer
