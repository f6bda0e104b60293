"""Slack and Teams under the Procfile's processes, judged from outside: a host commits two
events that a rule naming Slack and Teams fires on; the organisation's Slack and Teams
channels (receivers on 127.0.0.1) each get one message per claim, Slack after failing twice,
with every attempt kept."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from db.delivery.chat_channels import save_chat_channel
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import add_admin, scalar
from tests.integration.conftest import wait_until
from tests.support.chat_receiver import ChatReceiver
from tests.support.procfile_stack import ProcfileStack
from tests.system.outcomes import RECOVERY_LIMIT
from tests.system.test_procfile_events import EVENT_SETTINGS, _case, _desk, _rule
from tocsin.core.settings import load_settings
from tocsin.shell.outbox import record_event

FAST = {**EVENT_SETTINGS, "WEBHOOK_RETRY_BASE_SECONDS": "0.2", "WEBHOOK_TIMEOUT_SECONDS": "1"}


def _enable(tenant: Tenant, channel: str, url: str) -> None:
    admin = add_admin(tenant, f"chat-{channel}@example.com")
    with tenant_tx(tenant.slug) as tx:
        save_chat_channel(tx, channel, enabled=True, webhook_url=url, keep_url=False, allow_private=True,
                          by_user_id=admin.id)


def _delivered(tenant: Tenant) -> int:
    return int(str(scalar(tenant, "SELECT count(*) FROM chat_deliveries WHERE status = 'delivered'")))


def test_a_hosts_events_reach_slack_and_teams_once_per_claim_with_every_attempt_kept(
    tenant: Tenant, procfile: Callable[..., ProcfileStack],
) -> None:
    _desk(tenant, _rule("Large case", channels=("in_app", "slack", "teams")))
    with ChatReceiver(lambda n: {1: 500, 2: 503}.get(n, 200)) as slack, ChatReceiver(answer=b"1") as teams:
        _enable(tenant, "slack", slack.url())
        _enable(tenant, "teams", teams.url("/webhookb2/x/IncomingWebhook/y"))
        procfile(**FAST).start_all()
        with psycopg.connect(load_settings().database_url) as conn:
            for n in (1, 2):
                record_event(conn, tenant.slug, _case(n))
            conn.commit()
        wait_until(lambda: _delivered(tenant) == 4, "two claims on two chat channels", RECOVERY_LIMIT)
        slack_posts, teams_posts = slack.posts(), teams.posts()
    assert [p.answered for p in slack_posts] == [500, 503, 200, 200]
    titles = sorted(p.message["blocks"][0]["text"]["text"] for p in slack_posts if p.answered == 200)
    assert titles == ["Case C-1", "Case C-2"]
    assert len(teams_posts) == 2 and all(p.message["type"] == "message" for p in teams_posts)
    assert scalar(tenant, "SELECT count(*) FROM chat_attempts") == 6
    assert scalar(tenant, "SELECT count(*) FROM chat_attempts WHERE outcome = 'retry'") == 2
