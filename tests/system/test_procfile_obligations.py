"""Obligations under the Procfile's processes: three clocks and a scan run by hand, certificates
in zones from UTC-11 to UTC+14, judged from outside: the ledger holds one claim per (rule,
subject, offset, due date), each on its subject's own local date, and the SES endpoint
received exactly one email per notice. A due date moved while its reminder waits in quiet
hours is cancelled, never sent, and the new date's cycle is claimed."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from db.people.preferences import save_schedule
from db.platform.tenancy import Tenant, tenant_tx
from domain.delivery.quiet_hours import QuietHours
from tests.integration.builders import scalar
from tests.integration.conftest import SesOutbox, wait_until
from tests.integration.platform_builders import add_person
from tests.integration.time_rule_support import (
    add_certificate,
    add_metrology,
    add_time_rule,
    move_due,
    rule_ledger,
)
from tests.support.procfile_stack import ProcfileStack
from tests.system.outcomes import RECOVERY_LIMIT, copies, delivery_ids, statuses

ZONES = ("Pacific/Pago_Pago", "America/Los_Angeles", "UTC", "Asia/Kolkata", "Pacific/Auckland",
         "Pacific/Kiritimati")


def _local_today(zone: str) -> object:
    return datetime.now(ZoneInfo(zone)).date()


def test_three_clocks_and_a_hand_run_scan_notify_each_zone_once_on_its_own_date(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    add_metrology(tenant)
    tech = add_person(tenant, "tech@example.com")
    add_time_rule(tenant)
    subjects = {}
    for zone in ZONES:
        due = _local_today(zone) + timedelta(days=7)  # type: ignore[operator]
        subjects[add_certificate(tenant, zone.replace("/", "-"), due, zone=zone,
                                 assignees=(tech,))] = zone
    stack = procfile(SCAN_INTERVAL_SECONDS="2", SWEEP_INTERVAL_SECONDS="2").start_all()
    stack.start("clock")
    stack.start("clock")
    # Someone debugging runs the scan by hand while the clocks tick.
    hand = subprocess.run([sys.executable, "-m", "tocsin.boot.cli", "scan", "--tenant", tenant.slug],
                          env=stack.env, capture_output=True, text=True, timeout=120, check=False)
    assert hand.returncode == 0, hand.stderr

    wait_until(lambda: statuses(tenant) == Counter({"accepted": len(ZONES)}), "every reminder sent",
               RECOVERY_LIMIT)
    stack.sweeps_done(3)
    assert all(p.running() for p in stack.started)
    rows = [r for r in rule_ledger(tenant) if r["status"] == "claimed"]
    assert len(rows) == len(ZONES)
    for r in rows:  # -7 claimed on the subject's own local date (or a day on, if it turned)
        zone = subjects[r["subject_id"]]
        assert r["threshold"] == "offset:-7"
        assert r["local_date"] in (r["due_on"] - timedelta(days=7), r["due_on"] - timedelta(days=6))
        assert r["rule_version"] == 1, zone
    assert scalar(tenant, "SELECT count(*) - count(DISTINCT (rule, subject_kind, subject_id, threshold, "
                          "due_on)) FROM notification_ledger") == 0
    assert copies(ses, tenant) == Counter(dict.fromkeys(delivery_ids(tenant), 1))
    assert sorted(e.to for e in ses.sent() if f".{tenant.slug}@" in e.message_id) == \
        ["tech@example.com"] * len(ZONES)


def test_a_due_date_moved_while_its_reminder_waits_is_cancelled_and_never_sent(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    add_metrology(tenant)
    tech = add_person(tenant, "tech@example.com")
    now = datetime.now(ZoneInfo(tenant.time_zone))
    # Quiet but for an hour that has passed: the reminder's email is deferred.
    quiet = QuietHours((now - timedelta(hours=1)).time().replace(second=0, microsecond=0),
                       (now - timedelta(hours=2)).time().replace(second=0, microsecond=0))
    with tenant_tx(tenant.slug) as tx:
        save_schedule(tx, tech, quiet=quiet, digest_time=time(8, 0), weekly_day=1,
                      zone=tenant.time_zone)
    add_time_rule(tenant)
    old = now.date() + timedelta(days=3)
    subject = add_certificate(tenant, "C1", old, assignees=(tech,))
    stack = procfile(SCAN_INTERVAL_SECONDS="2", SWEEP_INTERVAL_SECONDS="2").start_all()
    wait_until(lambda: statuses(tenant) == Counter({"deferred": 1}), "the reminder deferred",
               RECOVERY_LIMIT)

    new = now.date() + timedelta(days=20)
    move_due(tenant, subject, new)

    reason = f"due date moved from {old.isoformat()} to {new.isoformat()}"
    wait_until(lambda: any(r["status"] == "cancelled" for r in rule_ledger(tenant)),
               "the old reminder cancelled", RECOVERY_LIMIT)
    wait_until(lambda: any(r["due_on"] == new and r["status"] == "claimed" for r in rule_ledger(tenant)),
               "the new date's reminder claimed", RECOVERY_LIMIT)
    stack.sweeps_done(2)
    cancelled = [r for r in rule_ledger(tenant) if r["status"] == "cancelled"]
    assert [(r["due_on"], r["threshold"], r["status_reason"]) for r in cancelled] == [
        (old, "offset:-7", reason)]
    assert scalar(tenant, "SELECT count(*) FROM notification_deliveries WHERE status = 'cancelled' "
                          "AND status_reason = %s", reason) == 1
    assert not [e for e in ses.sent() if f".{tenant.slug}@" in e.message_id]
