"""POST /hooks/ses: SES events delivered by SNS (no login, no CSRF: the SNS signature is
the authentication). A message from a topic not in SNS_ALLOWED_TOPIC_ARNS, unsigned,
forged, stale or replayed gets 403 and changes nothing; a valid one is applied once."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, post
from litestar.params import RawBody
from litestar.response import Response
from litestar.status_codes import (
    HTTP_200_OK,
    HTTP_400_BAD_REQUEST,
    HTTP_403_FORBIDDEN,
    HTTP_502_BAD_GATEWAY,
)

from db.delivery.provider_events import (
    ProviderEvent,
    Replayed,
    confirm_subscription_once,
    record_notification,
)
from domain.delivery.sns_messages import (
    Envelope,
    SnsTrust,
    Untrusted,
    check_envelope,
    load_sns_json,
    parse_ses_event,
)
from domain.errors import NotFound
from portal.auth import PUBLIC
from portal.settings import app_settings
from portal.sns import ConfirmationFailed, verify_signature, visit_subscribe_url
from tocsin.core.clock import utcnow

__all__ = ["MAX_BODY", "ses_events"]

log = logging.getLogger("tocsin.hooks")

MAX_BODY = 256 * 1024 + 16 * 1024  # bytes: a 256 KB SNS message plus its envelope


def _plain(text: str, status: int) -> Response[str]:
    return Response(text, status_code=status, media_type="text/plain")


@post("/hooks/ses", opt={PUBLIC: True}, sync_to_thread=True, status_code=HTTP_200_OK,
      request_max_body_size=MAX_BODY)  # beyond it: 413 before the body is read
def ses_events(request: Request[Any, Any, Any], body: RawBody) -> Response[str]:
    if len(body) > MAX_BODY:
        return _plain("message too large", HTTP_400_BAD_REQUEST)
    settings = app_settings(request)
    trust = SnsTrust(settings.sns_allowed_topic_arns, settings.sns_test_cert_origin)
    try:
        message = load_sns_json(body)
        if not isinstance(message, dict):
            return _plain("not an SNS message", HTTP_400_BAD_REQUEST)
    except Untrusted:
        return _plain("not an SNS message", HTTP_400_BAD_REQUEST)
    try:
        # Cheap checks first (shape, topic, age, URLs): nothing is fetched for a message
        # that fails them.
        envelope = check_envelope(message, trust, utcnow())
        verify_signature(message, envelope)
        if envelope.kind == "SubscriptionConfirmation":
            return _confirm(envelope)
        if envelope.kind != "Notification":
            record_notification(envelope.message_id, envelope.topic_arn, None, None)
            return _plain("ignored", HTTP_200_OK)
        status = _apply(envelope, message)
    except Untrusted as error:
        log.warning("refused an SNS message: %s", error)
        if not settings.sns_allowed_topic_arns:
            log.warning("SNS_ALLOWED_TOPIC_ARNS is not set: every SNS message is refused")
        return _plain(f"forbidden: {error}", HTTP_403_FORBIDDEN)
    except Replayed:
        log.warning("refused a replayed SNS message %s", str(message.get("MessageId"))[:100])
        return _plain("forbidden: replayed", HTTP_403_FORBIDDEN)
    return _plain(status, HTTP_200_OK)


def _confirm(envelope: Envelope) -> Response[str]:
    assert envelope.subscribe_url is not None and envelope.token is not None  # checked by the envelope
    url = envelope.subscribe_url
    try:
        confirm_subscription_once(envelope.message_id, envelope.topic_arn, envelope.token,
                                  lambda: visit_subscribe_url(url))
    except ConfirmationFailed as error:
        log.warning("could not confirm the SNS subscription to %s: %s", envelope.topic_arn, error)
        return _plain("subscription not confirmed: SNS could not be reached", HTTP_502_BAD_GATEWAY)
    log.info("confirmed the SNS subscription to %s", envelope.topic_arn)
    return _plain("subscribed", HTTP_200_OK)


def _apply(envelope: Envelope, message: dict[str, object]) -> str:
    try:
        payload = load_sns_json(str(message["Message"]))
    except Untrusted:
        payload = None
    event = parse_ses_event(payload) if isinstance(payload, dict) else None
    message_id, topic = envelope.message_id, envelope.topic_arn
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
