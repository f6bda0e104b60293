"""Prometheus metrics, read from running processes: the Procfile's web, worker and clock
(started as `tocsin up` starts them, with METRICS_WORKER_PORT and METRICS_TOKEN set) scan a
tenant and deliver its reminder; the web's /metrics and the worker's endpoint then report
it, with bounded labels, and every metric the committed dashboard and alert rules name is
among what they export."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import dramatiq
import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from actors.scan import scan_tenant
from db.delivery.totals import CHANNELS, OPEN_STATUSES
from db.notices.scan import run_scan
from db.platform.tenancy import Tenant
from domain.delivery.states import ErrorClass
from domain.liveness import RunKind
from portal.live import InboxListener
from portal.metrics import WebCollector
from portal.settings import load_portal_settings
from tests.integration.builders import add_client, scalar
from tests.integration.conftest import WAIT_LIMIT, RunningWorker, new_tenant, remove_tenant, wait_until
from tests.integration.time_rule_support import (
    add_certificate,
    add_metrology,
    add_time_rule,
    move_due,
    time_rule,
)
from tests.support.faulty_ses import FaultySes
from tests.support.procfile_stack import ROOT, ProcfileStack, environment
from tocsin.core.settings import ConfigError, load_settings
from tocsin.messaging.queues import PRODUCT_QUEUES, QueueInspector
from tocsin.monitoring.metrics import WORKER_REGISTRY, install_endpoint
from tocsin.shell.services import free_port

OPS = ROOT / "ops"
DASHBOARD = OPS / "grafana" / "tocsin-dashboard.json"
ALERTS = OPS / "prometheus" / "alerts.yml"
TOKEN = "metrics-token-for-the-test-0123456789"
# A metric of ours or Dramatiq's, as PromQL names it (labels, functions and keywords are not).
METRIC_NAME = re.compile(r"\b(?:tocsin|dramatiq)_[a-z0-9_]+\b")


@dataclass(frozen=True)
class Running:
    stack: ProcfileStack
    tenant: Tenant
    worker_url: str
    samples: Path  # the directory the worker processes share their samples in


def scrape(url: str, token: str | None = TOKEN) -> list[Sample]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(url, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return [s for family in text_string_to_metric_families(response.text) for s in family.samples]


def value(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(s.value for s in samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def try_scrape(url: str) -> list[Sample]:
    try:
        return scrape(url)
    except (httpx.HTTPError, AssertionError):
        return []


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One stack for the module: a tenant with a client whose d7 reminder is due, scanned by
    the clock's first tick and delivered by the worker."""
    tenant = new_tenant()
    worker_port = free_port()
    stack = ProcfileStack(tmp_path_factory.mktemp("metrics"), SCAN_INTERVAL_SECONDS="3600",
                          WORKER_PROCESSES="2", WORKER_THREADS="2", METRICS_TOKEN=TOKEN,
                          METRICS_WORKER_PORT=str(worker_port), METRICS_DATABASE_SECONDS="1")
    try:
        today = datetime.now(ZoneInfo(tenant.time_zone)).date()
        add_client(tenant, today + timedelta(days=7), name="Counted Ltd")
        add_obligation(tenant, today + timedelta(days=7))  # claimed at -7, skipped at -30
        stack.start_all()
        wait_until(lambda: scalar(tenant, "SELECT count(*) FROM notification_deliveries "
                                          "WHERE channel = 'email' AND status = 'accepted'") == 1,
                   "the reminder to be delivered", WAIT_LIMIT * 2)
        workers = stack.line("worker").dramatiq_workers()
        samples = Path(environment(workers[0])["PROMETHEUS_MULTIPROC_DIR"])
        yield Running(stack, tenant, f"http://127.0.0.1:{worker_port}/", samples)
    finally:
        stack.close()
        remove_tenant(tenant)
    assert not samples.exists(), "tocsin worker removes its sample directory when it stops"


def add_obligation(tenant: Tenant, due: date) -> int:
    """A certificate due on ``due`` under a time rule that notifies no one (no email to
    wait for): only the scan's claims are counted."""
    add_metrology(tenant)
    add_time_rule(tenant, time_rule(actions={**time_rule()["actions"], "channels": ["in_app"]}))
    return add_certificate(tenant, "M-1", due)


def web_samples(running: Running) -> list[Sample]:
    return scrape(f"{running.stack.portal_url}/metrics")


def test_the_worker_endpoint_counts_the_scans_claim_the_provider_call_and_dramatiqs_messages(
    running: Running,
) -> None:
    def counted() -> bool:
        samples = try_scrape(running.worker_url)
        return (value(samples, "tocsin_scan_claims_total", rule="licence", outcome="claimed") >= 1
                and value(samples, "tocsin_scan_claims_total", rule="time", outcome="claimed") >= 1
                and value(samples, "tocsin_scan_claims_total", rule="time", outcome="skipped") >= 1
                and value(samples, "tocsin_email_attempts_total") >= 1
                and value(samples, "dramatiq_messages_total", actor_name="deliver_email") >= 1)

    wait_until(counted, "the worker's endpoint to count the scan and the delivery")
    samples = scrape(running.worker_url)
    assert value(samples, "tocsin_scan_duration_seconds_count") >= 1
    assert [s.name for s in samples if s.name == "tocsin_scan_time_cancelled_total"] \
        == ["tocsin_scan_time_cancelled_total"]  # exported before anything was cancelled
    assert value(samples, "dramatiq_messages_total", actor_name="scan_tenant") >= 1
    # The provider accepted the one call: every error class is there, at zero.
    assert {s.labels["error_class"] for s in samples if s.name == "tocsin_email_errors_total"} \
        == {"transient", "permanent", "uncertain"}
    assert value(samples, "tocsin_email_errors_total") == 0


def test_every_worker_process_writes_to_the_one_directory_the_endpoint_sums(running: Running) -> None:
    # Dramatiq's children: the two worker processes (WORKER_PROCESSES) and the one it forked
    # for the endpoint, which only reads.
    children = running.stack.line("worker").dramatiq_workers()
    assert len(children) == 3
    assert {Path(environment(pid)["PROMETHEUS_MULTIPROC_DIR"]) for pid in children} == {running.samples}
    writers = {int(f.stem.rpartition("_")[2]) for f in running.samples.glob("*.db")}
    assert len(writers & set(children)) == 2


def test_the_web_reports_queues_deliveries_run_ages_and_latency_by_route_template(
    running: Running,
) -> None:
    # A request to a route with a parameter: its latency is filed under the template.
    httpx.get(f"{running.stack.portal_url}/clients/424242", timeout=10)
    httpx.get(f"{running.stack.portal_url}/inbox/stream", timeout=10)  # not signed in: refused at once
    samples = web_samples(running)
    assert value(samples, "tocsin_metrics_source_up", source="postgresql") == 1
    assert value(samples, "tocsin_metrics_source_up", source="redis") == 1
    for queue in PRODUCT_QUEUES:
        assert value(samples, "tocsin_queue_consumers", queue=queue) >= 1, queue
        assert value(samples, "tocsin_queue_unconsumed", queue=queue) == 0, queue
    assert {(s.labels["status"], s.labels["channel"]) for s in samples if s.name == "tocsin_deliveries"} \
        == {(status, channel) for status in OPEN_STATUSES for channel in CHANNELS}
    kinds = {s.labels["kind"] for s in samples if s.name == "tocsin_run_age_seconds"}
    assert kinds == {k.value for k in RunKind}
    assert value(samples, "tocsin_tenants_active") >= 1
    assert value(samples, "tocsin_sse_connections") == 0
    timed = {(s.labels["method"], s.labels["route"], s.labels["status"])
             for s in samples if s.name == "tocsin_http_request_duration_seconds_count"}
    routes = {route for _, route, _ in timed}
    assert ("GET", "/clients/{client_id}", "303") in timed  # not signed in: sent to sign in
    assert ("GET", "/healthz", "200") in timed  # the stack waited on it
    assert not any("424242" in r for r in routes)
    assert "/metrics" not in routes  # scrapes are not counted
    assert "/inbox/stream" not in routes  # open for minutes by design: counted as SSE connections


def test_no_label_names_a_tenant_and_every_label_has_few_values(running: Running) -> None:
    for samples in (web_samples(running), scrape(running.worker_url)):
        values: dict[str, set[str]] = {}
        for s in samples:
            assert running.tenant.slug not in "".join(s.labels.values()), s
            for label, v in s.labels.items():
                values.setdefault(label, set()).add(v)
        assert not {"tenant", "slug", "tenant_id"} & set(values)
        # le (bucket bounds) and quantile are fixed by the metric; everything else is short.
        for label, seen in values.items():
            if label not in ("le", "quantile"):
                assert len(seen) <= 30, (label, seen)


def test_metrics_refuse_a_missing_or_wrong_token_and_set_no_cookie(running: Running) -> None:
    url = f"{running.stack.portal_url}/metrics"
    missing = httpx.get(url, timeout=10)
    wrong = httpx.get(url, headers={"Authorization": "Bearer not-the-token-at-all-0000"}, timeout=10)
    basic = httpx.get(url, headers={"Authorization": f"Basic {TOKEN}"}, timeout=10)
    for refused in (missing, wrong, basic):
        assert refused.status_code == 401
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        assert "tocsin_" not in refused.text
    right = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert right.status_code == 200
    assert right.headers["content-type"].startswith("text/plain")
    assert "set-cookie" not in right.headers


def _dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["panels"], "the dashboard has panels"
    expressions = []
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        expressions.extend(target["expr"] for target in panel["targets"])
    return expressions


def _alert_expressions() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text())
    expressions = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert {"alert", "expr", "labels", "annotations"} <= set(rule), rule
            assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
            assert rule["annotations"]["summary"], rule["alert"]
            expressions.append(str(rule["expr"]))
    return expressions


def test_the_alert_rules_cover_the_sweep_the_consumers_the_failure_rate_and_the_lag() -> None:
    names = {rule["alert"] for group in yaml.safe_load(ALERTS.read_text())["groups"]
             for rule in group["rules"]}
    assert {"TocsinSweepOverdue", "TocsinQueueWithoutConsumer", "TocsinEmailFailureRate",
            "TocsinQueueLag", "TocsinOutboxLag", "TocsinTenantBreakerOpen"} <= names


def test_every_metric_the_dashboard_and_the_alerts_name_is_exported_by_the_web_or_a_worker(
    running: Running,
) -> None:
    wait_until(lambda: value(try_scrape(running.worker_url), "tocsin_email_attempts_total") >= 1,
               "the worker's endpoint to count the delivery")
    exported = {s.name for s in web_samples(running)} | {s.name for s in scrape(running.worker_url)}
    for expression in _dashboard_expressions() + _alert_expressions():
        named = set(METRIC_NAME.findall(expression))
        assert named, f"no Tocsin or Dramatiq metric in {expression!r}"
        assert named <= exported, f"{sorted(named - exported)} in {expression!r} are not exported"


def test_a_scrape_reads_postgresql_again_only_once_its_interval_has_passed(tenant: Tenant) -> None:
    settings = load_settings()
    inspector = QueueInspector.for_redis(settings.redis_url, settings.dramatiq_namespace)
    listener = InboxListener(settings.redis_url, settings.dramatiq_namespace)
    cached = WebCollector(inspector, listener, sweep_interval_seconds=60, database_seconds=3600)
    fresh = WebCollector(inspector, listener, sweep_interval_seconds=60, database_seconds=0)

    before_cached = _all_deliveries(cached)
    before_fresh = _all_deliveries(fresh)
    today = datetime.now(ZoneInfo(tenant.time_zone)).date()
    add_client(tenant, today + timedelta(days=7), name="Later Ltd")
    run_scan(tenant.slug, datetime.now(UTC))
    assert _all_deliveries(cached) == before_cached  # served again: no new reading yet
    assert _all_deliveries(fresh) > before_fresh  # read again: the scan's new deliveries count


def _all_deliveries(collector: WebCollector) -> float:
    return sum(s.value for family in collector.collect() if family.name == "tocsin_deliveries"
               for s in family.samples)


def test_a_worker_with_a_metrics_port_refuses_to_boot_outside_tocsin_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    settings = replace(load_settings(), metrics_worker_port=free_port())
    with pytest.raises(ConfigError, match="tocsin worker"):
        install_endpoint(dramatiq.get_broker(), settings)


def test_a_short_metrics_token_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="METRICS_TOKEN"):
        load_portal_settings("http://127.0.0.1:8000", {"METRICS_TOKEN": "short"})
    assert load_portal_settings("http://127.0.0.1:8000", {"METRICS_TOKEN": TOKEN}).metrics_token == TOKEN



def _worker_counts() -> dict[str, float]:
    def get(name: str, **labels: str) -> float:
        return WORKER_REGISTRY.get_sample_value(name, labels) or 0.0

    return {"attempts": get("tocsin_email_attempts_total"),
            **{c.value: get("tocsin_email_errors_total", error_class=c.value) for c in ErrorClass},
            "claimed": get("tocsin_scan_claims_total", rule="licence", outcome="claimed"),
            **{f"time {o}": get("tocsin_scan_claims_total", rule="time", outcome=o)
               for o in ("claimed", "skipped")},
            "time cancelled": get("tocsin_scan_time_cancelled_total")}


def test_the_scan_counts_time_rule_claims_skips_and_cancelled_moves(tenant: Tenant) -> None:
    as_of = datetime(2027, 6, 1, 12, 0, tzinfo=UTC)
    moved = add_obligation(tenant, as_of.date() + timedelta(days=7))
    run_scan(tenant.slug, as_of)  # claimed at -7; its preparation message is lost below
    worker = RunningWorker()  # starts from empty queues: the claim waits unprepared
    try:
        # A host moves the date by the table contract, past the register; another
        # certificate becomes due: the next scan cancels one and claims and skips the others.
        move_due(tenant, moved, as_of.date() + timedelta(days=20))
        add_certificate(tenant, "M-2", as_of.date() + timedelta(days=7))
        before = _worker_counts()
        scan_tenant.send(tenant.slug, (as_of + timedelta(hours=1)).isoformat())
        worker.drain()
        after = _worker_counts()
    finally:
        worker.stop()
    assert {k: after[k] - before[k] for k in ("time claimed", "time skipped", "time cancelled")} \
        == {"time claimed": 2, "time skipped": 1, "time cancelled": 1}


def test_a_rejected_send_counts_one_provider_call_and_one_permanent_error(
    tenant: Tenant, worker: RunningWorker, faulty_ses: FaultySes,
) -> None:
    today = datetime.now(ZoneInfo(tenant.time_zone)).date()
    add_client(tenant, today + timedelta(days=7), name="Rejected Ltd")
    faulty_ses.policy = lambda n: "reject"
    before = _worker_counts()
    run_scan(tenant.slug, datetime.now(UTC))  # its email goes to the worker once committed
    worker.drain()
    assert scalar(tenant, "SELECT status FROM notification_deliveries WHERE channel = 'email'") == "failed"
    after = _worker_counts()
    assert after["attempts"] - before["attempts"] == 1
    assert after["permanent"] - before["permanent"] == 1
    assert after["transient"] == before["transient"] and after["uncertain"] == before["uncertain"]


def test_an_open_live_inbox_stream_is_counted_until_it_closes() -> None:
    settings = load_settings()
    inspector = QueueInspector.for_redis(settings.redis_url, settings.dramatiq_namespace)
    listener = InboxListener(settings.redis_url, settings.dramatiq_namespace)
    collector = WebCollector(inspector, listener, sweep_interval_seconds=60, database_seconds=3600)

    def streams() -> float:
        return next(s.value for family in collector.collect() if family.name == "tocsin_sse_connections"
                    for s in family.samples)

    assert streams() == 0
    with listener.watch("some-tenant", 1), listener.watch("some-tenant", 2):
        assert streams() == 2
    assert streams() == 0


def test_a_scrape_while_redis_is_down_reports_it_down_instead_of_failing() -> None:
    settings = load_settings()
    nowhere = QueueInspector.for_redis("redis://127.0.0.1:1/0", settings.dramatiq_namespace)  # no one there
    listener = InboxListener(settings.redis_url, settings.dramatiq_namespace)
    collector = WebCollector(nowhere, listener, sweep_interval_seconds=60, database_seconds=3600)
    families = {family.name: family for family in collector.collect()}
    up = {s.labels["source"]: s.value for s in families["tocsin_metrics_source_up"].samples}
    assert up == {"redis": 0, "postgresql": 1}
    assert "tocsin_queue_messages" not in families  # no made-up zeros for what was not read
    assert "tocsin_deliveries" in families
