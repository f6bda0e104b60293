"""Ops alerts to an SNS topic (the local endpoint in development), each published once."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from db.delivery.alerts import has_unpublished, mark_published, take_unpublished
from db.platform.tenancy import tenant_tx
from tocsin.core import runtime
from tocsin.core.settings import Settings
from tocsin.providers.ses import SesMailer, aws_client

if TYPE_CHECKING:
    from mypy_boto3_sns import SNSClient

__all__ = [
    "LOCAL_OPS_TOPIC",
    "LOCAL_SES_EVENTS_TOPIC",
    "PUBLISH_HOLD_SECONDS",
    "prepare_local_aws",
    "publish_alerts",
    "sns",
]

log = logging.getLogger("tocsin.ops")

LOCAL_OPS_TOPIC = "tocsin-ops"  # created on the local endpoint by `tocsin up` and the tests
LOCAL_SES_EVENTS_TOPIC = "tocsin-ses-events"  # the local topic the SES hook accepts


def sns(settings: Settings) -> SNSClient:
    return aws_client(settings, "sns")  # type: ignore[return-value]


def prepare_local_aws(settings: Settings) -> dict[str, str]:
    """On the local endpoint: register the sender and create the ops topic and the SES
    events topic; returns the settings naming them (OPS_TOPIC_ARN, SNS_ALLOWED_TOPIC_ARNS)
    for the caller to hand to the processes it starts (real AWS is set up by an operator)."""
    SesMailer(settings).ensure_sender_identity()
    client = sns(settings)
    return {
        "OPS_TOPIC_ARN": client.create_topic(Name=LOCAL_OPS_TOPIC)["TopicArn"],
        "SNS_ALLOWED_TOPIC_ARNS": client.create_topic(Name=LOCAL_SES_EVENTS_TOPIC)["TopicArn"],
    }


# How long a publisher holds the alerts it took: far longer than publishing 100 of them takes.
PUBLISH_HOLD_SECONDS = 120


def publish_alerts(slug: str) -> int:
    """Publish the tenant's unpublished alerts (the PublishAlerts effect after a sweep):
    taken and held in one transaction, published to SNS with no transaction open, then
    marked in another. Concurrent publishers skip each other's held alerts; one that dies
    between the call and the mark leaves them to be published again once its hold runs out."""
    settings = runtime.settings()
    if settings.ops_topic_arn is None:
        with tenant_tx(slug) as tx:
            waiting = has_unpublished(tx)
        if waiting:
            log.warning("tenant=%s ops alert(s) waiting: OPS_TOPIC_ARN is not set", slug)
        return 0
    with tenant_tx(slug) as tx:
        alerts = take_unpublished(tx, PUBLISH_HOLD_SECONDS)
    if not alerts:
        return 0
    client = sns(settings)
    for alert in alerts:
        client.publish(
            TopicArn=settings.ops_topic_arn,
            Subject=f"Tocsin {alert.kind.replace('_', ' ')}: tenant {slug}"[:100],
            Message=f"Tenant {slug}: {alert.summary}",
            MessageAttributes={
                "tenant": {"DataType": "String", "StringValue": slug},
                "kind": {"DataType": "String", "StringValue": alert.kind},
                "ref": {"DataType": "Number", "StringValue": str(alert.ref_id)},
            },
        )
    with tenant_tx(slug) as tx:
        mark_published(tx, [a.id for a in alerts])
    log.warning("tenant=%s published %d ops alert(s)", slug, len(alerts))
    return len(alerts)
