"""Slack and Teams through the real worker to incoming-webhook receivers on 127.0.0.1: one
Block Kit message and one Adaptive Card per (claim, recipient, channel) with a link into the
portal, a failing receiver retried until it answers with every attempt kept, a category's
Slack turned off honoured, quiet hours deferring chat like email (a critical notice goes
through), the SSRF guard deciding before any connection, and Slack's one message per second
per URL held across the worker's threads."""

from __future__ import annotations

from datetime import UTC, datetime, time

from db.delivery.chat_channels import (
    chat_health,
    save_chat_address,
    save_chat_channel,
    save_chat_choice,
    save_chat_default,
)
from db.delivery.chat_deliveries import NO_URL, claim_chats
from db.notices.rule_notices import PreparedReport, prepare_rule_claims
from db.people.preferences import save_category_default, save_schedule
from db.platform.tenancy import Tenant, tenant_tx
from domain.delivery.preferences import CATEGORIES, CHAT_OPTED_OUT, PRODUCT_DEFAULT, resolve_channel_choice
from domain.delivery.quiet_hours import QuietHours
from tests.integration.builders import scalar
from tests.integration.conftest import RunningWorker, use_settings, wait_until
from tests.integration.platform_builders import add_person, add_product, add_rule, add_subject, fire
from tests.support.chat_receiver import ChatReceiver
from tocsin.core import runtime

ASSIGNEES = [{"type": "assignees"}]
CHAT = ("in_app", "slack", "teams")


def _enable(tenant: Tenant, channel: str, channel_url: str = "") -> None:
    with tenant_tx(tenant.slug) as tx:
        admin = add_person(tenant, f"admin-{channel}@example.com")
        save_chat_channel(tx, channel, enabled=True, webhook_url=channel_url, keep_url=False,
                          allow_private=True, by_user_id=admin)


def _own_url(tenant: Tenant, user: int, channel: str, url: str) -> None:
    with tenant_tx(tenant.slug) as tx:
        save_chat_address(tx, user, channel, url, allow_private=True)


def _prepare(tenant: Tenant, *claims: int, now: datetime | None = None) -> PreparedReport:
    with tenant_tx(tenant.slug) as tx:
        return prepare_rule_claims(tx, list(claims), now)


def _statuses(tenant: Tenant) -> dict[tuple[int | None, str], str]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute("SELECT recipient_user_id, channel, status FROM chat_deliveries").fetchall()
    return {(None if r[0] is None else int(str(r[0])), str(r[1])): str(r[2]) for r in rows}


def _all_done(tenant: Tenant) -> bool:
    return scalar(tenant, "SELECT count(*) FROM chat_deliveries WHERE status IN ('pending', 'sending')") == 0


def test_slack_and_teams_each_receive_one_formatted_message_per_claim_with_a_link_into_the_portal(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    product = add_product(tenant)
    one, two = add_person(tenant, "one@example.com"), add_person(tenant, "two@example.com")
    with ChatReceiver() as slack, ChatReceiver(answer=b"1") as teams:
        _enable(tenant, "slack", slack.url())
        _enable(tenant, "teams", teams.url("/webhookb2/abc/IncomingWebhook/def"))
        subject = add_subject(tenant, product, "C-7", assignees=[one, two], fields={"amount": 900})
        claim = fire(tenant, add_rule(tenant, product, "Large <case> & more", recipients=ASSIGNEES,
                                      channels=CHAT, title="{{ rule.name }}: {{ subject.external_id }}",
                                      body="Amount {{ field.amount }} <!channel>"), subject)
        _prepare(tenant, claim)
        _prepare(tenant, claim)  # a claim prepared twice queues nothing more
        wait_until(lambda: _statuses(tenant) == {(None, "slack"): "delivered", (None, "teams"): "delivered"},
                   "both chat messages delivered")
        worker.drain()
        [posted] = slack.posts()
        [card] = teams.posts()
    portal = runtime.settings().portal_url.rstrip("/")
    header, section, actions = posted.message["blocks"]
    assert header == {"type": "header", "text": {"type": "plain_text", "emoji": True,
                                                  "text": "Large <case> & more: C-7"}}
    assert section["text"] == {"type": "mrkdwn", "text": "Amount 900 &lt;!channel&gt;"}  # no @channel
    assert actions["elements"][0]["url"] == f"{portal}/inbox"
    assert posted.message["text"] == "Large &lt;case&gt; &amp; more: C-7"
    [attachment] = card.message["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    content = attachment["content"]
    assert (content["type"], content["version"]) == ("AdaptiveCard", "1.4")
    assert [b["text"] for b in content["body"]] == ["Large <case> & more: C-7", "Amount 900 <!channel>"]
    assert content["actions"] == [{"type": "Action.OpenUrl", "title": "Open in Tocsin",
                                   "url": f"{portal}/inbox"}]
    assert scalar(tenant, "SELECT array_agg(outcome) FROM chat_attempts") == ["delivered", "delivered"]
    with tenant_tx(tenant.slug) as tx:
        health = {str(h.channel): h for h in chat_health(tx)}
    assert health["slack"].delivered_24h == 1 and health["slack"].last_success_at is not None


def test_a_receiver_failing_then_answering_delivers_once_with_every_attempt_recorded(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    use_settings(webhook_retry_base_seconds=0.05)
    product = add_product(tenant)
    person = add_person(tenant, "retry@example.com")
    answers = {1: 500, 2: 429, 3: 503}
    with ChatReceiver(lambda n: answers.get(n, 200)) as slack:
        _enable(tenant, "slack")
        _own_url(tenant, person, "slack", slack.url("/services/T1/B1/own"))
        claim = fire(tenant, add_rule(tenant, product, "Flaky", recipients=ASSIGNEES, channels=CHAT),
                     add_subject(tenant, product, "C-8", assignees=[person]))
        _prepare(tenant, claim)
        wait_until(lambda: _statuses(tenant) == {(person, "slack"): "delivered"},
                   "delivered after failures", 30)
        worker.drain()
        answered = [p.answered for p in slack.posts()]
    assert answered == [500, 429, 503, 200]
    outcomes = scalar(tenant, "SELECT array_agg(outcome ORDER BY attempt_no) FROM chat_attempts")
    codes = scalar(tenant, "SELECT array_agg(status_code ORDER BY attempt_no) FROM chat_attempts")
    assert (outcomes, codes) == (["retry", "retry", "retry", "delivered"], [500, 429, 503, 200])
    assert scalar(tenant, "SELECT attempts FROM chat_deliveries") == 4


def test_a_permanent_refusal_ends_failed_and_visible_without_more_attempts(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    product = add_product(tenant)
    person = add_person(tenant, "gone@example.com")
    with ChatReceiver(lambda n: 404) as slack:
        _enable(tenant, "slack")
        _own_url(tenant, person, "slack", slack.url())
        _prepare(tenant, fire(tenant, add_rule(tenant, product, "Gone", recipients=ASSIGNEES, channels=CHAT),
                              add_subject(tenant, product, "C-9", assignees=[person])))
        wait_until(lambda: _statuses(tenant) == {(person, "slack"): "failed"}, "the 404 to fail it")
        worker.drain()
        assert len(slack.posts()) == 1
    assert scalar(tenant, "SELECT status_reason FROM chat_deliveries") == "the receiver refused it for good"
    with tenant_tx(tenant.slug) as tx:
        [slack_health] = [h for h in chat_health(tx) if str(h.channel) == "slack"]
    assert (slack_health.failed_24h, slack_health.failed_attempts_24h) == (1, 1)


def test_a_person_who_turned_a_categorys_slack_off_gets_none(tenant: Tenant, worker: RunningWorker) -> None:
    product = add_product(tenant)
    quiet, keen = add_person(tenant, "off@example.com"), add_person(tenant, "on@example.com")
    with ChatReceiver() as slack:
        _enable(tenant, "slack")
        _own_url(tenant, quiet, "slack", slack.url("/services/off"))
        _own_url(tenant, keen, "slack", slack.url("/services/on"))
        with tenant_tx(tenant.slug) as tx:
            save_chat_choice(tx, quiet, "case_alert", "slack", False)
        _prepare(tenant, fire(tenant, add_rule(tenant, product, "Alert", recipients=ASSIGNEES, channels=CHAT),
                              add_subject(tenant, product, "C-10", assignees=[quiet, keen])))
        wait_until(lambda: _all_done(tenant), "the chat deliveries settled")
        worker.drain()
        assert [p.path for p in slack.posts()] == ["/services/on"]
    assert _statuses(tenant) == {(quiet, "slack"): "cancelled", (keen, "slack"): "delivered"}
    assert scalar(tenant, "SELECT status_reason FROM chat_deliveries WHERE recipient_user_id = %s",
                  quiet) == CHAT_OPTED_OUT


def test_quiet_hours_defer_chat_like_email_and_a_critical_notice_goes_through(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    product = add_product(tenant)
    sleeper, on_call = add_person(tenant, "sleeper@example.com"), add_person(tenant, "oncall@example.com")
    with ChatReceiver() as teams:
        _enable(tenant, "teams")
        for user, path in ((sleeper, "/sleeper"), (on_call, "/oncall")):
            _own_url(tenant, user, "teams", teams.url(path))
            with tenant_tx(tenant.slug) as tx:
                save_schedule(tx, user, quiet=QuietHours(time(22, 0), time(7, 0)), digest_time=time(8, 0),
                              weekly_day=1, zone="Europe/London")
        night = datetime(2027, 1, 5, 23, 0, tzinfo=UTC)  # 23:00 in London
        ordinary = fire(tenant, add_rule(tenant, product, "Ordinary", recipients=ASSIGNEES, channels=CHAT),
                        add_subject(tenant, product, "C-11", assignees=[sleeper]))
        urgent = fire(tenant, add_rule(tenant, product, "Urgent", recipients=ASSIGNEES, channels=CHAT,
                                       critical=True),
                      add_subject(tenant, product, "C-12", assignees=[on_call]))
        _prepare(tenant, ordinary, urgent, now=night)
        wait_until(lambda: _statuses(tenant).get((on_call, "teams")) == "delivered", "the critical message")
        worker.drain()
        assert [p.path for p in teams.posts()] == ["/oncall"]
    assert _statuses(tenant)[(sleeper, "teams")] == "deferred"
    assert scalar(tenant, "SELECT send_after FROM chat_deliveries WHERE recipient_user_id = %s",
                  sleeper) == datetime(2027, 1, 6, 7, 0, tzinfo=UTC)


def test_with_private_addresses_not_allowed_the_guard_refuses_before_any_connection(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    product = add_product(tenant)
    person = add_person(tenant, "guarded@example.com")
    with ChatReceiver() as slack:
        _enable(tenant, "slack")
        _own_url(tenant, person, "slack", slack.url())
        use_settings(webhook_allow_private=False, webhook_retry_base_seconds=60.0)
        rule = add_rule(tenant, product, "Guarded", recipients=ASSIGNEES, channels=CHAT)
        _prepare(tenant, fire(tenant, rule, add_subject(tenant, product, "C-13", assignees=[person])))
        refused = "SELECT count(*) FROM chat_attempts WHERE outcome = 'refused'"
        wait_until(lambda: scalar(tenant, refused) == 1, "the guard's refusal recorded")
        assert slack.posts() == []  # (its retry waits a minute: the test ends before it)
    error = str(scalar(tenant, "SELECT error FROM chat_attempts"))
    assert "127.0.0.1, a loopback address: refused" in error
    assert scalar(tenant, "SELECT called_at FROM chat_attempts") is None
    assert _statuses(tenant) == {(person, "slack"): "pending"}  # retried later, visibly waiting


def test_slack_gets_at_most_one_message_per_second_per_url(tenant: Tenant, worker: RunningWorker) -> None:
    product = add_product(tenant)
    people = [add_person(tenant, f"p{n}@example.com") for n in range(4)]
    with ChatReceiver() as slack:
        _enable(tenant, "slack", slack.url("/services/shared"))
        rule = add_rule(tenant, product, "Burst", recipients=ASSIGNEES, channels=CHAT)
        claims = [fire(tenant, rule, add_subject(tenant, product, f"C-2{n}", assignees=[p]))
                  for n, p in enumerate(people)]
        for claim in claims:  # four claims, four messages, each handed to the workers at once
            _prepare(tenant, claim)
        wait_until(lambda: _all_done(tenant), "the burst delivered", 60)
        worker.drain()
        arrivals = sorted(p.arrived for p in slack.posts())
    assert len(arrivals) == 4
    # Counted, not timed: however slow the machine, no half-second window holds two messages.
    busiest = max(sum(1 for t in arrivals if start <= t < start + 0.5) for start in arrivals)
    assert busiest == 1


def test_the_queueing_sql_resolves_each_persons_choice_as_the_domain_does(tenant: Tenant) -> None:
    """The SQL twin of resolve_channel_choice (rule 14): every combination of the person's
    choice, the organisation's default and the category's lock, one category per
    (default, lock) pair and one person per choice."""
    product = add_product(tenant)
    choices: list[bool | None] = [None, True, False]
    people = {choice: add_person(tenant, f"choice-{choice}@example.com") for choice in choices}
    _enable(tenant, "slack")
    pairs = [(default, locked) for default in choices for locked in (False, True)]
    categories = dict(zip(pairs, CATEGORIES[:len(pairs)], strict=True))
    with tenant_tx(tenant.slug) as tx:
        for (default, locked), category in categories.items():
            save_category_default(tx, category, PRODUCT_DEFAULT, locked=locked,
                                  lock_reason="required" if locked else None, critical=False,
                                  by_user_id=people[None])
            if default is not None:
                save_chat_default(tx, category, "slack", default)
    for choice, user in people.items():
        _own_url(tenant, user, "slack", f"http://127.0.0.1:9/{user}")
        if choice is not None:
            with tenant_tx(tenant.slug) as tx:  # written directly: a locked category refuses the form
                for category in categories.values():
                    tx.conn.execute("INSERT INTO chat_preferences (user_id, category, channel, enabled) "
                                    "VALUES (%s, %s, 'slack', %s)", [user, category, choice])
    subject = add_subject(tenant, product, "C-30", assignees=list(people.values()))
    for category in categories.values():
        rule = add_rule(tenant, product, f"Rule {category}", recipients=ASSIGNEES, channels=CHAT,
                        category=category)
        _prepare(tenant, fire(tenant, rule, subject))
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute("SELECT n.category, d.recipient_user_id, d.status FROM chat_deliveries d "
                               "JOIN notifications n ON n.ledger_id = d.ledger_id "
                               "AND n.recipient_user_id = d.recipient_user_id").fetchall()
    got = {(str(r[0]), int(str(r[1]))): str(r[2]) != "cancelled" for r in rows}
    wanted = {(category, people[choice]): resolve_channel_choice(choice, default, locked=locked)
              for (default, locked), category in categories.items() for choice in choices}
    assert got == wanted


def test_a_deferred_message_is_not_sent_to_a_person_who_turned_the_channel_off_meanwhile(
    tenant: Tenant,
) -> None:
    product = add_product(tenant)
    changed, removed, kept = (add_person(tenant, f"{n}@example.com") for n in ("changed", "removed", "kept"))
    _enable(tenant, "slack")
    for user in (changed, removed, kept):
        _own_url(tenant, user, "slack", f"http://127.0.0.1:9/{user}")
    _prepare(tenant, fire(tenant, add_rule(tenant, product, "Later", recipients=ASSIGNEES, channels=CHAT),
                          add_subject(tenant, product, "C-40", assignees=[changed, removed, kept])))
    with tenant_tx(tenant.slug) as tx:
        save_chat_choice(tx, changed, "case_alert", "slack", False)
        save_chat_address(tx, removed, "slack", "", allow_private=True)
        ids = [int(str(r[0])) for r in tx.conn.execute("SELECT id FROM chat_deliveries ORDER BY id")]
    claimed = claim_chats(tenant.slug, ids, 60.0)
    assert [c.delivery_id for c in claimed] == [
        int(str(scalar(tenant, "SELECT id FROM chat_deliveries WHERE recipient_user_id = %s", kept)))]
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute("SELECT recipient_user_id, status, status_reason "
                               "FROM chat_deliveries").fetchall()
    why = {int(str(r[0])): (str(r[1]), r[2]) for r in rows}
    assert why[changed] == ("cancelled", CHAT_OPTED_OUT)
    assert why[removed] == ("cancelled", NO_URL)
    assert why[kept][0] == "sending"
