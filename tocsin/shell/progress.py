"""A progress line for long CLI runs (`tocsin migrate` over thousands of schemas): count,
rate and time left, redrawn in place on a terminal and printed as a line every few seconds
otherwise (a log file or CI output must not fill with carriage returns)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["LINE_SECONDS", "REDRAW_SECONDS", "ProgressLine", "progress_text"]

REDRAW_SECONDS = 0.2  # on a terminal: at most five redraws a second
LINE_SECONDS = 10.0  # elsewhere: one line per ten seconds (and one at the end)


def progress_text(label: str, done: int, total: int, elapsed_seconds: float) -> str:
    """``migrating 1,200/2,000 (60%) 48.0/s, about 17s left``."""
    share = done / total if total else 1.0
    text = f"{label} {done:,}/{total:,} ({share:.0%})"
    if done and elapsed_seconds > 0:
        rate = done / elapsed_seconds
        text += f" {rate:,.1f}/s"
        if done < total:
            text += f", about {_duration((total - done) / rate)} left"
        else:
            text += f", {_duration(elapsed_seconds)} in all"
    return text


def _duration(seconds: float) -> str:
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class ProgressLine:
    def __init__(self, label: str, total: int, stream: TextIO,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.total, self.stream, self.clock = label, total, stream, clock
        self.tty = stream.isatty()
        self.started = clock()
        self.shown_at = float("-inf")
        self.done = 0
        self.shown_done = -1

    def update(self, done: int) -> None:
        self.done = done
        now = self.clock()
        if now - self.shown_at < (REDRAW_SECONDS if self.tty else LINE_SECONDS) and done < self.total:
            return
        self.shown_at = now
        self._show(now)

    def finish(self) -> None:
        """The last figure, whether the run completed or was interrupted."""
        if self.shown_done != self.done:
            self._show(self.clock())
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _show(self, now: float) -> None:
        self.shown_done = self.done
        text = progress_text(self.label, self.done, self.total, now - self.started)
        if self.tty:
            self.stream.write("\r\033[K" + text)  # back to the start of the line, clear it
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
