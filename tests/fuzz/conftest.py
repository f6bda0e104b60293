"""The fuzz tests: generated input against the real portal over real services. Each run
prints how many requests it generated and how many were answered with 500 or more."""

from __future__ import annotations

import pytest

from tests.fuzz.budget import TALLY, total_requests
from tests.integration.conftest import sns_signer, tenant  # noqa: F401  (shared with the integration tests)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TALLY.requests == 0:
        return
    terminalreporter.write_sep("-", "fuzz")
    terminalreporter.write_line(
        f"fuzz: {TALLY.requests} generated requests (budget FUZZ_REQUESTS={total_requests()}), "
        f"{len(TALLY.server_errors)} responses of 500 or more"
    )
    for line in TALLY.server_errors[:20]:
        terminalreporter.write_line(f"  {line}")
