"""The next-work summary's delivery trigger (tenant migration 0060) names the statuses the
scan sends from: domain/delivery/states.py WAITING, one source of truth."""

from __future__ import annotations

import re

from db.platform.migrations import TENANT
from domain.delivery.states import WAITING


def test_the_deferred_delivery_trigger_watches_exactly_the_waiting_statuses() -> None:
    migration = next(m for m in TENANT if m.version == "0060_next_work_triggers")
    found = re.search(r"NEW\.status IN \(([^)]*)\)", migration.sql)
    assert found is not None
    named = {s.strip().strip("'") for s in found.group(1).split(",")}
    assert named == {s.value for s in WAITING}
