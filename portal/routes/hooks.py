"""POST /hooks/ses: SES events delivered by SNS (no login, no CSRF: the SNS signature is
the authentication). Unsigned, forged, stale or replayed messages get 403 and change
nothing; a valid one is applied once."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from litestar import Request, post
from litestar.params import RawBody
from litestar.response import Response
from litestar.status_codes import HTTP_200_OK, HTTP_400_BAD_REQUEST, HTTP_403_FORBIDDEN

from db.provider_events import ProviderEvent, Replayed, record_notification
from domain.errors import NotFound
from domain.sns import Untrusted, parse_ses_event
from portal.auth import PUBLIC
from portal.settings import app_settings
from portal.sns import confirm_subscription, verify_sns_message

log = logging.getLogger("tocsin.hooks")

MAX_BODY = 256 * 1024  # bytes; SNS messages are at most 256 KB


def _plain(text: str, status: int) -> Response[str]:
    return Response(text, status_code=status, media_type="text/plain")


@post("/hooks/ses", opt={PUBLIC: True}, sync_to_thread=True, status_code=HTTP_200_OK,
      request_max_body_size=MAX_BODY)  # beyond it: 413 before the body is read
def ses_events(request: Request[Any, Any, Any], body: RawBody) -> Response[str]:
    if len(body) > MAX_BODY:
        return _plain("message too large", HTTP_400_BAD_REQUEST)
    try:
        message = json.loads(body)
    except ValueError:
        return _plain("not an SNS message", HTTP_400_BAD_REQUEST)
    if not isinstance(message, dict):
        return _plain("not an SNS message", HTTP_400_BAD_REQUEST)
    settings = app_settings(request)
    try:
        verify_sns_message(message, settings.sns_trusted_url_pattern, datetime.now(UTC))
        if message["Type"] == "SubscriptionConfirmation":
            confirm_subscription(message, settings.sns_trusted_url_pattern)
            log.info("confirmed the SNS subscription to %s", message.get("TopicArn"))
            return _plain("subscribed", HTTP_200_OK)
        if message["Type"] != "Notification":
            return _plain("ignored", HTTP_200_OK)
        status = _apply(message)
    except Untrusted as error:
        log.warning("refused an SNS message: %s", error)
        return _plain("forbidden", HTTP_403_FORBIDDEN)
    except Replayed:
        log.warning("refused a replayed SNS message %s", message.get("MessageId"))
        return _plain("forbidden: replayed", HTTP_403_FORBIDDEN)
    return _plain(status, HTTP_200_OK)


def _apply(message: dict[str, object]) -> str:
    try:
        payload = json.loads(str(message.get("Message")))
    except ValueError:
        payload = None
    event = parse_ses_event(payload) if isinstance(payload, dict) else None
    message_id, topic = str(message["MessageId"]), str(message.get("TopicArn"))
    if event is None:
        record_notification(message_id, topic, None, None)
        return "ignored"
    provider_event = ProviderEvent(event.delivery_id, event.event_type, event.provider_message_id,
                                   event.occurred_at, event.permanent_bounce, event.detail)
    try:
        status = record_notification(message_id, topic, event.tenant, provider_event)
    except NotFound:  # a tenant that no longer exists: nothing to update
        record_notification(message_id, topic, None, None)
        return "ignored"
    log.info("ses event tenant=%s delivery=%d %s -> %s", event.tenant, event.delivery_id,
             event.event_type, status or "no such delivery")
    return status or "ignored"
