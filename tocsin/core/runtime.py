"""One process's settings: read once, at start-up, then handed to what needs them.

The process's bootstrap (tocsin/boot/) calls `use` with the settings it read; code that
runs later asks `settings()` for that same object instead of reading the environment again.
A process that never called `use` (a test helper, a script) gets the environment read
once, on first use. This module holds the settings only: it starts nothing.
"""

from __future__ import annotations

import threading

from tocsin.core.settings import Settings, load_settings

__all__ = ["settings", "use"]

_lock = threading.Lock()
_settings: Settings | None = None


def use(chosen: Settings) -> Settings:
    """Make ``chosen`` this process's settings. Calling it again replaces them (a test
    pointing the process elsewhere)."""
    global _settings
    with _lock:
        _settings = chosen
    return chosen


def settings() -> Settings:
    global _settings
    current = _settings
    if current is not None:
        return current
    with _lock:
        if _settings is None:
            _settings = load_settings()
        return _settings
