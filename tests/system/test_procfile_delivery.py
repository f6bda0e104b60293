"""Delivery under the Procfile's processes, judged from outside: quiet hours released by the
running sweep, a permanent failure made visible and alerted, three clocks at once, and
email links that reach the web process. Each test runs a stack of its own: a stack left
running across tests would also scan and deliver the next test's tenant (its worker sends
through the real endpoint what a test's faulty endpoint was meant to refuse)."""

from __future__ import annotations

import re
import urllib.parse
from collections import Counter
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import httpx

from db.people.clients import create_client
from db.people.preferences import save_schedule
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.delivery.quiet_hours import QuietHours
from domain.people.identity import Role
from tests.integration.builders import PASSWORD, add_admin, add_client, add_clients_in_bulk, scalar
from tests.integration.conftest import OpsInbox, SesOutbox, wait_until
from tests.support.faulty_ses import FaultySes
from tests.support.procfile_stack import ProcfileStack, environment
from tests.system.outcomes import RECOVERY_LIMIT, copies, delivery_ids, signed_in_portal, statuses

QUIET_FOR = timedelta(seconds=20)  # quiet hours end this long after the notice is created


def _today(tenant: Tenant) -> date:
    return datetime.now(ZoneInfo(tenant.time_zone)).date()


def test_an_email_deferred_by_quiet_hours_that_end_20_seconds_later_is_sent_after_them_once(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    stack = procfile().start_all()
    now = datetime.now(UTC).replace(microsecond=0)
    quiet_until = now + QUIET_FOR
    # Client, person and quiet hours in one transaction: the next scan finds them together.
    with tenant_tx(tenant.slug) as tx:
        client = create_client(tx, "Quiet Ltd", _today(tenant) + timedelta(days=7))
        user = create_user(tx, "night@quiet.example", Role.CLIENT_USER, PASSWORD, client_id=client.id)
        save_schedule(tx, user.id, quiet=QuietHours((now - timedelta(hours=1)).time(), quiet_until.time()),
                      digest_time=time(8), weekly_day=1, zone="UTC")

    wait_until(lambda: delivery_ids(tenant) != [], "the running scan to claim the reminder")
    [delivery_id] = delivery_ids(tenant)
    assert scalar(tenant, "SELECT send_after FROM notification_deliveries") == quiet_until
    assert datetime.now(UTC) < quiet_until, "the scan came after the quiet hours (machine too slow?)"
    assert statuses(tenant) == Counter({"deferred": 1})
    assert copies(ses, tenant) == Counter()

    wait_until(lambda: statuses(tenant) == Counter({"accepted": 1}), "the email after the quiet hours",
               RECOVERY_LIMIT)
    sent_at = scalar(tenant, "SELECT min(started_at) FROM delivery_attempts")
    assert sent_at >= quiet_until
    stack.sweeps_done(3)  # later sweeps find nothing more to release
    assert copies(ses, tenant) == Counter({delivery_id: 1})
    assert [e.to for e in ses.sent() if f".{tenant.slug}@" in e.message_id] == [user.email]


def test_a_permanent_failure_is_failed_shown_on_needs_attention_and_alerted_once(
    tenant: Tenant, ses: SesOutbox, ops_inbox: OpsInbox, procfile: Callable[..., ProcfileStack],
) -> None:
    _, [user] = add_client(tenant, _today(tenant) + timedelta(days=7), name="Rejected Ltd")
    admin = add_admin(tenant, "admin@rejected.example")
    with FaultySes(ses.endpoint, policy=lambda n: "reject") as provider:
        stack = procfile(SES_ENDPOINT_URL=provider.url).start_all()
        wait_until(lambda: delivery_ids(tenant) != [] and set(statuses(tenant)) == {"failed"},
                   "the rejected emails to fail", RECOVERY_LIMIT)
        failed = delivery_ids(tenant)

        def alerts() -> list[str]:
            return [m for m in ops_inbox.messages() if m.startswith(f"Tenant {tenant.slug}: delivery ")]

        wait_until(lambda: len(alerts()) >= len(failed), "the ops alerts", RECOVERY_LIMIT)
        stack.sweeps_done(3)  # later sweeps publish nothing again
        assert sorted(int(m.split()[3]) for m in alerts()) == failed  # one alert per failure
        # Failed for good at the first answer: never retried.
        assert scalar(tenant, "SELECT array_agg(DISTINCT attempts) FROM notification_deliveries") == [1]
        assert provider.count("reject") >= len(failed)
        assert copies(ses, tenant) == Counter()

        with signed_in_portal(stack.portal_url, tenant, admin.email) as (browser, _):
            page = browser.get("/ledger/attention")
    assert page.status_code == 200
    assert "Failed and unknown deliveries" in page.text
    assert user.email in page.text and "Failed after 1 attempt" in page.text


def test_three_clocks_for_several_intervals_claim_and_send_each_notice_once(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    add_clients_in_bulk(tenant, 20, _today(tenant) + timedelta(days=7), users_each=2)
    stack = procfile(SCAN_INTERVAL_SECONDS="2", SWEEP_INTERVAL_SECONDS="2").start_all()
    stack.start("clock")
    stack.start("clock")
    wait_until(lambda: len(delivery_ids(tenant)) == 40, "the first clients' reminders")
    # More clients while the three clocks tick: their scans race on the new claims.
    add_clients_in_bulk(tenant, 20, _today(tenant) + timedelta(days=7), users_each=2)

    def ticks() -> list[int]:
        return [p.output().count("tick enqueued") for p in stack.started if p.name == "clock"]

    wait_until(lambda: min(ticks()) >= 5, "five ticks from each clock", RECOVERY_LIMIT)
    wait_until(lambda: statuses(tenant) == Counter({"accepted": 80}), "every reminder sent",
               RECOVERY_LIMIT)
    stack.sweeps_done(3)
    assert len(ticks()) == 3 and all(p.running() for p in stack.started)
    # One d7 claim per client (the earlier milestones are recorded as skipped), none twice.
    assert scalar(tenant, "SELECT count(*) FROM notification_ledger WHERE status <> 'skipped'") == 40
    assert scalar(tenant, "SELECT count(*) - count(DISTINCT (rule, subject_kind, subject_id, threshold, "
                          "due_on)) FROM notification_ledger") == 0
    assert scalar(tenant, "SELECT count(*) FROM notifications") == 80  # one notice per person
    assert copies(ses, tenant) == Counter(dict.fromkeys(delivery_ids(tenant), 1))


def test_an_email_sent_under_the_procfile_links_to_the_web_process_and_its_unsubscribe_answers(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    """honcho gives each process its own PORT; the worker's links must still name the web's."""
    add_client(tenant, _today(tenant) + timedelta(days=7), name="Linked Ltd")
    stack = procfile().start_all()
    wait_until(lambda: len(copies(ses, tenant)) == 1, "the reminder email", RECOVERY_LIMIT)
    [email] = [m for m in ses.sent() if f".{tenant.slug}@" in m.message_id]

    header = re.fullmatch(r"<(\S+)>", email.headers["List-Unsubscribe"])
    assert header, email.headers
    unsubscribe = header.group(1)
    web = urllib.parse.urlsplit(stack.portal_url).netloc
    links = re.findall(r"https?://\S+", email.body)
    assert unsubscribe in links
    assert links and {urllib.parse.urlsplit(link).netloc for link in links} == {web}
    # The worker that wrote them was given a PORT of its own, as honcho gives it.
    assert environment(stack.line("worker").process.pid)["PORT"] != str(stack.web_port)

    answer = httpx.get(unsubscribe, timeout=30)
    assert answer.status_code == 200
    assert "Unsubscribe from these emails" in answer.text  # the portal's confirm page
