"""The README's ten-line webhook receiver, run as written against real calls from the
worker: it verifies every signature, handles each webhook-id once (a redelivery repeats the
id), and refuses a forged body."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks.webhooks import WebhookVerificationError

from db.delivery.webhook_deliveries import queue_test_event, redeliver
from db.delivery.webhook_endpoints import create_endpoint
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import scalar
from tests.integration.conftest import RunningWorker, wait_until
from tests.support.webhook_receiver import WebhookReceiver

README = Path(__file__).resolve().parents[2] / "README.md"


def _example(secret: str) -> dict[str, Any]:
    """The README's receiver, executed with the endpoint's secret and a `handle` that counts."""
    [code] = [block for block in re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
              if "def receive(" in block]
    assert len(code.strip().splitlines()) <= 12, "the README promises a ten-line receiver"
    handled: list[dict[str, Any]] = []
    namespace: dict[str, Any] = {"handle": handled.append, "handled": handled}
    exec(compile(code.replace('"whsec_..."', repr(secret)), str(README), "exec"), namespace)
    return namespace


def test_the_readme_receiver_verifies_real_calls_and_handles_a_redelivery_once(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    with WebhookReceiver() as receiver:
        with tenant_tx(tenant.slug) as tx:
            endpoint = create_endpoint(tx, receiver.url, ["webhook.test"], allow_private=True)
            first = queue_test_event(tx, endpoint.id, "readme")
            queue_test_event(tx, endpoint.id, "readme")
        wait_until(lambda: len(receiver.calls()) == 2, "two test events")
        # A redelivery is refused while the delivery is on its way: the receiver has the
        # call before the worker records its answer.
        wait_until(lambda: scalar(tenant, "SELECT count(*) FROM webhook_deliveries "
                                  "WHERE status = 'delivered'") == 2, "both calls recorded delivered")
        with tenant_tx(tenant.slug) as tx:
            redeliver(tx, first)
        wait_until(lambda: len(receiver.calls()) == 3, "the redelivery")
        calls = receiver.calls()

    example = _example(endpoint.secret)
    assert [example["receive"](c.body, c.headers) for c in calls] == [204, 204, 204]
    assert [h["type"] for h in example["handled"]] == ["webhook.test", "webhook.test"]  # the repeat dropped
    forged = calls[0].body.replace(b"readme", b"forged")
    with pytest.raises(WebhookVerificationError):
        example["receive"](forged, calls[0].headers)
