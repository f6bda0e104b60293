"""The clock process: enqueue a scan tick, a sweep, a digest tick and a relay tick once at
start, then each on its own interval (the scan every SCAN_INTERVAL_SECONDS, the sweep and
the digests every SWEEP_INTERVAL_SECONDS, the relay's polling every EVENTS_POLL_SECONDS);
and, unless EVENTS_WAKEUP is off, listen for the events hosts commit through
tocsin.shell.outbox.record_event and wake the relay for each (actors/relay.py).

It keeps no state and decides nothing; two clocks (or a clock and a manual `tocsin scan`)
only make the scans run more often, which changes nothing by construction.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType

import dramatiq

from tocsin import boot
from tocsin.core.settings import load_settings

__all__ = ["run_clock"]

log = logging.getLogger("tocsin.clock")


def run_clock(stop: threading.Event | None = None) -> None:
    settings = boot.start(load_settings())  # once for the process
    from actors.digest import digest_tick
    from actors.evidence import RETENTION_EVERY_SECONDS, retention_tick, seal_tick, verify_tick
    from actors.relay import relay_tick, wake_for_host_commits
    from actors.scan import tick
    from actors.sweep import sweep

    boot.start_messaging(settings)  # the broker the ticks are sent through
    boot.tune_collector()

    stop = stop or threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s clock %(message)s")
    log.info("scan every %ss, sweep every %ss, events polled every %ss",
             settings.scan_interval_seconds, settings.sweep_interval_seconds,
             settings.events_poll_seconds)
    listener = None
    if settings.events_wakeup:  # hosts' commits wake the relay through PostgreSQL
        listener = threading.Thread(target=wake_for_host_commits, args=(stop,),
                                    name="ready-events", daemon=True)
        listener.start()
    schedule: list[tuple[dramatiq.Actor[[], None], str, int]] = [
        (tick, "tick", settings.scan_interval_seconds),
        (sweep, "sweep", settings.sweep_interval_seconds),
        (digest_tick, "digest tick", settings.sweep_interval_seconds),  # digests due this minute
        # The outbox's polling fallback: events whose wake-up was lost are found here.
        (relay_tick, "relay tick", settings.events_poll_seconds),
        # The evidence chain: written facts sealed shortly after commit, and each chain verified.
        (seal_tick, "seal tick", settings.evidence_seal_seconds),
        (verify_tick, "evidence verification", settings.evidence_verify_seconds),
        # Message bodies and addresses past each tenant's retention, blanked.
        (retention_tick, "evidence retention", RETENTION_EVERY_SECONDS),
    ]
    due = {name: 0.0 for _, name, _ in schedule}
    quiet_until = 0.0
    while not stop.is_set():
        now = time.monotonic()
        for actor, name, interval in schedule:
            if now < due[name]:
                continue
            due[name] = now + interval
            try:
                actor.send()
                if name == "seal tick":
                    pass  # every few seconds, and a seal that finds nothing does nothing: not logged
                elif name != "relay tick":
                    log.info("%s enqueued", name)
                elif now >= quiet_until:  # every few seconds: said once a minute
                    log.info("relay tick enqueued (every %ss, logged once a minute)",
                             settings.events_poll_seconds)
                    quiet_until = now + 60
            except Exception as error:  # Redis down: say so, and try again next interval
                log.error("could not enqueue the %s: %s", name, error)
        stop.wait(max(0.0, min(due.values()) - time.monotonic()))
    if listener is not None:
        listener.join(timeout=5)
    log.info("stopped")
