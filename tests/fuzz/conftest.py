"""The fuzz tests: generated input against the real portal over real services. Each run
prints how many requests it generated and how many were answered with 500 or more."""

from __future__ import annotations

import pytest

from tests.fuzz.budget import TALLY, print_tally
from tests.integration.conftest import sns_signer, tenant  # noqa: F401  (shared with the integration tests)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a pytest-xdist worker: the tally goes to the controller, which prints the run's
    (tests/conftest.py)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["fuzz_tally"] = {"requests": TALLY.requests, "server_errors": TALLY.server_errors}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    print_tally(terminalreporter)
