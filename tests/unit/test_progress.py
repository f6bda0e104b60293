"""The progress line of long CLI runs: count, rate and time left, redrawn on a terminal,
printed every few seconds elsewhere."""

from __future__ import annotations

import io

from tocsin.shell.progress import LINE_SECONDS, ProgressLine, progress_text


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_text_gives_count_share_rate_and_time_left() -> None:
    assert progress_text("migrating", 1200, 2000, 25.0) == \
        "migrating 1,200/2,000 (60%) 48.0/s, about 17s left"


def test_the_text_gives_the_total_time_when_done_and_no_rate_before_the_first() -> None:
    assert progress_text("migrating", 0, 10, 0.0) == "migrating 0/10 (0%)"
    assert progress_text("migrating", 3000, 3000, 125.0) == \
        "migrating 3,000/3,000 (100%) 24.0/s, 2m05s in all"
    assert progress_text("m", 1, 4000, 4.0).endswith("about 4h26m left")


def test_without_a_terminal_it_prints_a_line_every_few_seconds_and_the_last_one() -> None:
    clock, out = FakeClock(), io.StringIO()
    line = ProgressLine("migrating", 100, out, clock)
    for done in range(1, 101):
        clock.now += LINE_SECONDS / 40  # 40 steps per line period
        line.update(done)
    line.finish()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("migrating 1/100")
    assert len(lines) == 4 and lines[-1].startswith("migrating 100/100 (100%)")
    assert "\r" not in out.getvalue()


def test_on_a_terminal_it_redraws_one_line_in_place_and_ends_it_when_interrupted() -> None:
    clock, out = FakeClock(), Terminal()
    line = ProgressLine("migrating", 100, out, clock)
    for done in range(1, 11):
        clock.now += 1
        line.update(done)
    line.finish()
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert text.count("\r") == 10
    assert text.rstrip("\n").split("\r\033[K")[-1].startswith("migrating 10/100 (10%)")
