"""The clock process: enqueue a scan tick once at start and then every interval.

It keeps no state and decides nothing; two clocks (or a clock and a manual `tocsin scan`)
only make the scans run more often, which changes nothing by construction.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

from tocsin.config import load_settings

log = logging.getLogger("tocsin.clock")


def run_clock(stop: threading.Event | None = None) -> None:
    settings = load_settings()
    from actors.digest import digest_tick
    from actors.scan import tick  # configures the broker

    stop = stop or threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s clock %(message)s")
    log.info("ticking every %ss", settings.scan_interval_seconds)
    while not stop.is_set():
        try:
            tick.send()
            digest_tick.send()
            log.info("tick enqueued")
        except Exception as error:  # Redis down: say so, and try again next interval
            log.error("could not enqueue the tick: %s", error)
        stop.wait(settings.scan_interval_seconds)
    log.info("stopped")
