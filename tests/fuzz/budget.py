"""The fuzz run's budget and its tally: how many generated requests were sent, and how many
were answered with 500 or more (the goal is none). Printed at the end of the run."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

DEFAULT_REQUESTS = 300  # generated requests in `make test`; `make fuzz` asks for 6,000
# Routes whose 503 is their answer, not a failure: /healthz says "degraded" with 503 while no
# worker consumes the queues (none runs beside the fuzz); every other 5xx counts.
VERDICT_ROUTES = frozenset({"/healthz"})


def total_requests() -> int:
    raw = os.environ.get("FUZZ_REQUESTS", "")
    return int(raw) if raw.isdecimal() and raw.isascii() and int(raw) > 0 else DEFAULT_REQUESTS


def share(fraction: float) -> int:
    """This test's part of the budget, in generated requests (at least a handful)."""
    return max(10, round(total_requests() * fraction))


def is_server_error(path: str, status: int) -> bool:
    """5xx, except the health verdict "degraded" (no worker runs beside the fuzz)."""
    if status == 503 and path.split("?")[0] in VERDICT_ROUTES:
        return False
    return status >= 500


@dataclass
class Tally:
    requests: int = 0
    server_errors: list[str] = field(default_factory=list)  # "METHOD path -> status"
    printed: bool = False

    def record(self, method: str, path: str, status: int) -> None:
        self.requests += 1
        if is_server_error(path, status):
            self.server_errors.append(f"{method} {path[:200]} -> {status}")


TALLY = Tally()


def print_tally(terminalreporter: pytest.TerminalReporter) -> None:
    """Once per run: the xdist controller may hold both conftests that call it."""
    if TALLY.requests == 0 or TALLY.printed:
        return
    TALLY.printed = True
    terminalreporter.write_sep("-", "fuzz")
    terminalreporter.write_line(
        f"fuzz: {TALLY.requests} generated requests (budget FUZZ_REQUESTS={total_requests()}), "
        f"{len(TALLY.server_errors)} responses of 500 or more"
    )
    for line in TALLY.server_errors[:20]:
        terminalreporter.write_line(f"  {line}")
