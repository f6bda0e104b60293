"""`make test` relies on pytest-xdist's --dist loadgroup to keep the browser tests on one
worker, each system module's tests on one worker, and a module's expensive module-scoped
fixture (the wheel's build and install) from being set up once per worker. pytest 9.2 moved
node ids where pytest-xdist 3.8 cannot append the group to them, and the grouping then stops
without a word: this runs a small suite the way `make test` does and looks where it ran."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SUITE = '''
import os
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("n", range(6))
def test_reports_its_worker(n):
    with open(os.path.join(os.environ["WORKERS_DIR"], f"{n}.txt"), "w") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"])
'''


def test_tests_of_one_xdist_group_run_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(SUITE)
    (tmp_path / "workers").mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path / "test_grouped.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env=os.environ | {"WORKERS_DIR": str(tmp_path / "workers")})
    assert result.returncode == 0, result.stdout + result.stderr
    workers = {path.read_text() for path in (tmp_path / "workers").glob("*.txt")}
    assert len(list((tmp_path / "workers").glob("*.txt"))) == 6
    assert len(workers) == 1, f"one group's tests ran on {sorted(workers)}"
