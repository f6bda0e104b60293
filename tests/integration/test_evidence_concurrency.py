"""Many writers, one line: eight concurrent scans, the relay evaluating host events and a
worker's four threads delivering, all writing facts while two sealers link them. The chain
verifies with no gap (every fact once) and no fork (every record has one successor)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import psycopg

from actors.relay import relay_tick
from db.evidence.chain import seal_tenant
from db.evidence.verify import verify_tenant
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import create_rule
from tests.integration.builders import add_clients_in_bulk, scan_concurrently
from tests.integration.conftest import RunningWorker, SesOutbox
from tests.integration.intake_support import case_event, fraud_desk
from tests.integration.test_relay import BIG_CASE_RULE
from tocsin.core import runtime
from tocsin.shell.outbox import record_event

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)
HOST_EVENTS = 40


def _rows(tenant: Tenant, query: str) -> list[tuple[object, ...]]:
    with tenant_tx(tenant.slug) as tx:
        return tx.conn.execute(query).fetchall()


def test_concurrent_scans_relay_and_workers_leave_one_chain_without_gap_or_fork(
        tenant: Tenant, worker: RunningWorker, ses: SesOutbox) -> None:
    add_clients_in_bulk(tenant, 60, AS_OF.date() + timedelta(days=7), users_each=1)
    fraud_desk(tenant)
    with tenant_tx(tenant.slug) as tx:
        create_rule(tx, BIG_CASE_RULE, by="test")
    with psycopg.connect(runtime.settings().database_url) as conn:
        for n in range(HOST_EVENTS):
            record_event(conn, tenant.slug, case_event(f"C-{n}", assignees=["ana@example.com"],
                                                       fields={"amount": 2_000_000}))
            conn.commit()

    stop = threading.Event()
    sealer_errors: list[BaseException] = []

    def seal_until_stopped() -> None:
        try:
            while not stop.is_set():
                seal_tenant(tenant.slug, max_rows=50)
        except BaseException as error:
            sealer_errors.append(error)

    sealers = [threading.Thread(target=seal_until_stopped) for _ in range(2)]
    for s in sealers:
        s.start()
    try:
        relay_tick.send()
        assert scan_concurrently(tenant, AS_OF, 8) == []
        worker.drain()
    finally:
        stop.set()
        for s in sealers:
            s.join()
    assert sealer_errors == []
    seal_tenant(tenant.slug)

    report = verify_tenant(tenant.slug)
    assert report.ok, [b.describe() for b in report.breaks[:5]]
    assert report.pending == 0
    claims = _rows(tenant, "SELECT count(*) FILTER (WHERE rule_id IS NULL), count(*) FILTER "
                           "(WHERE rule_id IS NOT NULL) FROM notification_ledger")[0]
    # Per client the licence's d7 claimed, d30 and d14 recorded skipped; the rule once per event.
    assert claims == (3 * 60, HOST_EVENTS)
    # No gap: sequences 1..N, each insert fact once per row.
    seqs = _rows(tenant, "SELECT min(seq), max(seq), count(*), count(DISTINCT prev_hash) "
                         "FROM evidence_chain")[0]
    assert seqs[0] == 1 and seqs[1] == seqs[2] == report.records == report.head_seq
    assert seqs[3] == seqs[2]  # no fork: no two records share a predecessor
    twice = _rows(tenant, "SELECT kind, ref FROM evidence_chain WHERE kind IN "
                          "('claim', 'delivery', 'attempt') GROUP BY kind, ref HAVING count(*) > 1")
    assert twice == []
    counted = dict(_rows(tenant, "SELECT kind, count(*) FROM evidence_chain GROUP BY kind"))
    assert counted["claim"] == 3 * 60 + HOST_EVENTS
    assert counted["attempt"] == _rows(tenant, "SELECT count(*) FROM delivery_attempts")[0][0] > 0
