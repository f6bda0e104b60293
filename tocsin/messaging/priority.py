"""Which messages a worker runs first when it holds several (Dramatiq's actor priority:
lower runs first; the default is 0).

A worker prefetches messages of every queue it consumes into one in-process queue ordered
by priority. The per-tenant background work of the periodic ticks (scans, sweeps, digest
builds: 50 tenants' sweeps arrive together every minute) is BACKGROUND, so the relay's
evaluations, preparations and emails that a person is waiting for go ahead of it instead of
queueing behind a burst of sweeps (seen as the p99 of bench/events.py's commit-to-inbox
latency). Priority orders waiting messages only: nothing is skipped or starved, since a
tick's fan-out is bounded by the tenants and runs as soon as the urgent work is done.
"""

__all__ = ["BACKGROUND"]

BACKGROUND = 100
