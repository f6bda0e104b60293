"""After commit: what a tenant transaction asks for with tx.after_commit runs once it has
committed, never after a rollback, and an effect that fails is logged with its tenant and
does not undo the commit (db/platform/effects.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from db.platform.effects import SendEmails, handle, handler_of, stop_handling
from db.platform.tenancy import Tenant, tenant_tx


class Boom(Exception):
    pass


@pytest.fixture
def recorded() -> Iterator[list[tuple[str, list[int]]]]:
    """SendEmails carried out by a recorder instead of the broker, for the test's length."""
    calls: list[tuple[str, list[int]]] = []
    before = handler_of(SendEmails)
    handle(SendEmails, lambda slug, effect: calls.append((slug, effect.delivery_ids)))
    yield calls
    if before is None:
        stop_handling(SendEmails)
    else:
        handle(SendEmails, before)


def _marker(tenant: Tenant) -> int | None:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "SELECT count(*) FROM ops_alerts WHERE summary = 'after-commit test'").fetchone()
    return None if row is None else int(row[0])


def _write_marker(tx: object) -> None:
    tx.conn.execute(  # type: ignore[attr-defined]
        "INSERT INTO ops_alerts (kind, ref_id, summary) VALUES ('stuck_claim', 1, 'after-commit test')")


def test_an_effect_of_a_transaction_that_rolls_back_never_runs(
    tenant: Tenant, recorded: list[tuple[str, list[int]]]
) -> None:
    ran: list[str] = []
    with pytest.raises(Boom), tenant_tx(tenant.slug) as tx:
        _write_marker(tx)
        tx.after_commit(lambda: ran.append("callable"))
        tx.after_commit(SendEmails([1, 2]))
        raise Boom

    assert ran == [] and recorded == []
    assert _marker(tenant) == 0


def test_a_committed_transaction_runs_each_effect_once_with_each_kind_merged(
    tenant: Tenant, recorded: list[tuple[str, list[int]]]
) -> None:
    ran: list[str] = []
    with tenant_tx(tenant.slug) as tx:
        _write_marker(tx)
        tx.after_commit(SendEmails([1, 2]))
        tx.after_commit(lambda: ran.append("callable"))
        tx.after_commit(SendEmails([3]))

    assert ran == ["callable"]
    assert recorded == [(tenant.slug, [1, 2, 3])]  # one hand-over for the transaction
    assert _marker(tenant) == 1


def test_a_savepoint_that_fails_undoes_its_own_effects_only(
    tenant: Tenant, recorded: list[tuple[str, list[int]]]
) -> None:
    with tenant_tx(tenant.slug) as tx:
        tx.after_commit(SendEmails([1]))
        with pytest.raises(Boom), tx.savepoint():
            _write_marker(tx)
            tx.after_commit(SendEmails([2]))
            raise Boom
        assert tx.pending(SendEmails) == SendEmails([1])

    assert recorded == [(tenant.slug, [1])]
    assert _marker(tenant) == 0


def test_an_effect_that_raises_is_logged_with_its_tenant_and_the_commit_stands(
    tenant: Tenant, recorded: list[tuple[str, list[int]]], caplog: pytest.LogCaptureFixture
) -> None:
    def fails() -> None:
        raise Boom("the broker is down")

    caplog.set_level(logging.ERROR, logger="db.platform.effects")
    with tenant_tx(tenant.slug) as tx:
        _write_marker(tx)
        tx.after_commit(fails)
        tx.after_commit(SendEmails([7]))

    assert _marker(tenant) == 1  # committed, and stays so
    assert recorded == [(tenant.slug, [7])]  # the others still ran
    (failure,) = [r for r in caplog.records if "after-commit effect" in r.getMessage()]
    assert f"tenant={tenant.slug}" in failure.getMessage() and "fails" in failure.getMessage()
    assert failure.exc_info is not None and isinstance(failure.exc_info[1], Boom)
