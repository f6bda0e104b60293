"""Time comes from one clock: tocsin.core.clock. A module of the product that reads the
system clock itself (datetime.now, datetime.utcnow, date.today, time.time) escapes the
tests' pinned instant and decides on an hour the test did not choose."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("domain", "db", "actors", "portal", "tocsin")
THE_CLOCK = ROOT / "tocsin" / "core" / "clock.py"
SYSTEM_CLOCK = {("datetime", "now"), ("datetime", "utcnow"), ("date", "today"), ("time", "time")}


def _reads_of_the_system_clock(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and (node.func.value.id, node.func.attr) in SYSTEM_CLOCK):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.value.id}.{node.func.attr}()")
    return found


def test_only_the_clock_module_reads_the_system_clock() -> None:
    offenders = [
        read
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != THE_CLOCK
        for read in _reads_of_the_system_clock(path)
    ]
    assert offenders == [], "read tocsin.core.clock.utcnow() instead:\n" + "\n".join(offenders)


def test_the_check_sees_a_read_of_the_system_clock() -> None:
    sample = ROOT / "tests" / "unit" / "_clock_sample.py"
    sample.write_text("from datetime import UTC, datetime\nSTAMP = datetime.now(UTC)\n")
    try:
        assert _reads_of_the_system_clock(sample) == ["tests/unit/_clock_sample.py:2 datetime.now()"]
    finally:
        sample.unlink()
