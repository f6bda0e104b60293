"""bench/obligations.py at a tiny size, as a subprocess on the suite's services: it builds
its tenants, scans, replays, measures the ceiling, finds the scan's ledger equal to what
domain/rules/obligation_dates.py computes subject by subject, prints its figures and drops its tenants.
No figure is asserted: only that the bench runs and its own checks pass."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

from db.platform.pool import connection

ROOT = Path(__file__).resolve().parents[2]


def test_the_obligations_bench_runs_at_a_tiny_size_and_leaves_nothing_behind() -> None:
    prefix = f"oblsmoke{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [sys.executable, "-m", "bench.obligations", "--tenants", "3", "--subjects", "90",
         "--workers", "2", "--as-of", "2026-03-29T00:30:00Z", "--prefix", prefix],
        cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=900, check=False)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "matches domain/rules/obligation_dates.py" in out
    assert re.search(r"^    0 new ledger rows in .* \(unchanged\)$", out, re.MULTILINE), out
    claimed = re.search(r"^    ([\d,]+) ledger rows \(([\d,]+) claimed \+ ([\d,]+) skipped", out,
                        re.MULTILINE)
    assert claimed and int(claimed[2].replace(",", "")) > 0, out
    for line in ("a/c  scan / raw ceiling", "replay speed-up, time(a) / time(d)",
                 "| a/c (scan vs raw ceiling) |"):
        assert line in out
    with connection() as conn:
        left = conn.execute("SELECT count(*) FROM control.tenants WHERE starts_with(slug, %s)",
                            [prefix]).fetchone()
    assert left == (0,)
