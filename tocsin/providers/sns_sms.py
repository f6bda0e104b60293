"""The SMS provider adapter: AWS SNS `publish` to a phone number (or the local endpoint in
dev and tests), and SNS's own opt-out list. Built once per process, on first use."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

from botocore.exceptions import BotoCoreError, ClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from domain.delivery.sms import classify_sns_error
from domain.delivery.states import ErrorClass
from tocsin.core import runtime
from tocsin.core.settings import Settings
from tocsin.providers.ses import Accepted, ProviderError, aws_client

if TYPE_CHECKING:
    from mypy_boto3_sns import SNSClient

__all__ = ["SmsSender", "SnsSmsSender", "get_sms_sender", "set_sms_sender"]


class SmsSender(Protocol):
    def opted_out(self, phone: str) -> bool: ...

    def opted_out_numbers(self) -> frozenset[str]: ...

    def publish(self, phone: str, text: str) -> Accepted: ...


class SnsSmsSender:
    def __init__(self, settings: Settings):
        self._client: SNSClient = aws_client(settings, "sns")  # type: ignore[assignment]

    def opted_out(self, phone: str) -> bool:
        """SNS's answer for this number (a person who replied STOP to an earlier text).
        A failure to ask is a transient error: the text is not sent unchecked."""
        try:
            answer = self._client.check_if_phone_number_is_opted_out(phoneNumber=phone)
        except ClientError as error:
            raise _provider_error(error) from None
        except BotoCoreError as error:
            raise ProviderError(ErrorClass.TRANSIENT, f"opt-out check: {type(error).__name__}") from None
        return bool(answer.get("isOptedOut"))

    def opted_out_numbers(self) -> frozenset[str]:
        """Every number SNS holds as opted out of the account's texts (all pages)."""
        numbers: set[str] = set()
        token = ""
        try:
            while True:
                page = self._client.list_phone_numbers_opted_out(nextToken=token) if token \
                    else self._client.list_phone_numbers_opted_out()
                numbers.update(page.get("phoneNumbers", []))
                token = page.get("nextToken") or ""
                if not token:
                    return frozenset(numbers)
        except ClientError as error:
            raise _provider_error(error) from None
        except BotoCoreError as error:
            raise ProviderError(ErrorClass.TRANSIENT, f"opt-out list: {type(error).__name__}") from None

    def publish(self, phone: str, text: str) -> Accepted:
        try:
            response = self._client.publish(
                PhoneNumber=phone, Message=text,
                # Transactional: SNS routes for reliability, not price (these are compliance notices).
                MessageAttributes={"AWS.SNS.SMS.SMSType": {"DataType": "String",
                                                           "StringValue": "Transactional"}},
            )
        except ClientError as error:
            raise _provider_error(error) from None
        except BotoConnectionError as error:  # never connected: nothing was sent
            raise ProviderError(ErrorClass.TRANSIENT, type(error).__name__) from None
        except BotoCoreError as error:  # the request left; no answer came back
            raise ProviderError(ErrorClass.UNCERTAIN, type(error).__name__) from None
        return Accepted(response["MessageId"], response["ResponseMetadata"].get("RequestId"))


def _provider_error(error: ClientError) -> ProviderError:
    info = error.response.get("Error", {})
    meta = error.response.get("ResponseMetadata", {})
    return ProviderError(classify_sns_error(info.get("Code"), meta.get("HTTPStatusCode")),
                         f"{info.get('Code')}: {info.get('Message')}", meta.get("RequestId"),
                         code=info.get("Code"), http_status=meta.get("HTTPStatusCode"))


_lock = threading.Lock()
_sender: SmsSender | None = None


def get_sms_sender() -> SmsSender:
    global _sender
    with _lock:
        if _sender is None:
            _sender = SnsSmsSender(runtime.settings())
        return _sender


def set_sms_sender(sender: SmsSender | None) -> None:
    """Swap the process's sender (tests inject provider faults here)."""
    global _sender
    with _lock:
        _sender = sender
