"""The system tier: the Procfile's processes, started as `tocsin up` starts them, on the
test session's PostgreSQL, Redis and local SES/SNS endpoint, judged from outside only: what
the SES endpoint received, what the SNS topic carried, what the portal answers over HTTP,
and plain reads of the ledger and the deliveries.

Data is set up with the builders (or the CLI); nothing here calls the product's functions to
make something happen. Intervals are short so that recovery happens within a test's time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from db.platform.tenancy import Tenant
from tests.integration import conftest as integration
from tests.support.procfile_stack import ProcfileStack

# The integration tier's fixtures this tier shares.
tenant = integration.tenant
make_tenant = integration.make_tenant
ses = integration.ses
ops_inbox = integration.ops_inbox

# Seconds. Short, so that a lease runs out, a sweep comes round, an unknown outcome is
# reconciled and a failed preparation is retried while a test watches; the ratios between
# them are production's (a sweep for every inline pause, about two retries for each sweep).
SYSTEM_SETTINGS = {
    "SWEEP_INTERVAL_SECONDS": "5",
    "DELIVERY_LEASE_SECONDS": "10",
    "SCAN_INTERVAL_SECONDS": "5",
    "RECONCILE_WINDOW_SECONDS": "5",
    "PREPARE_BACKOFF_MIN_SECONDS": "0.05",
    "PREPARE_BACKOFF_MAX_SECONDS": "1",
    "PREPARE_INLINE_PAUSE_SECONDS": "5",
    "EVENTS_LISTEN_RETRY_SECONDS": "0.2",
}


@pytest.fixture
def procfile(tenant: Tenant, tmp_path: Path) -> Iterator[Callable[..., ProcfileStack]]:
    """Make a stack (not started) with the system settings and these overrides. Every stack
    made is closed after the test, before its tenant is removed, pass or fail."""
    stacks: list[ProcfileStack] = []
    # Its sign-ins come from 127.0.0.1, as every earlier real client's did. (Imported here:
    # the root conftest registers portal_support as a plugin only once the settings are set.)
    from tests.integration.portal_support import forget_sign_in_failures

    forget_sign_in_failures()

    def make(**settings: str) -> ProcfileStack:
        stack = ProcfileStack(tmp_path / f"stack{len(stacks) + 1}", **(SYSTEM_SETTINGS | settings))
        stacks.append(stack)
        return stack

    try:
        yield make
    finally:
        for stack in stacks:
            stack.close()
