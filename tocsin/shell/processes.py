"""The processes of the Procfile, and `tocsin up`, which runs them all on embedded services."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType

from tocsin.core.keys import kept_session_secret, require_strong_secret
from tocsin.core.settings import Settings, load_secrets, load_settings, worker_metrics_address
from tocsin.shell.services import start_embedded, wants_local_aws

__all__ = [
    "IDLE_POLL",
    "IDLE_POLL_MS",
    "PACKAGED_PROCFILE",
    "WORKER_BROKER",
    "WORKER_CRASH_LIMIT",
    "WORKER_CRASH_WINDOW",
    "WORKER_RESTART_BACKOFF",
    "procfile_environment",
    "run_everything",
    "run_worker",
    "status_command",
]

# A worker that keeps dying at once (a bad deploy, Redis refusing) is not restarted forever:
# this many unasked exits within the window end `tocsin worker` with an error.
WORKER_CRASH_LIMIT = 5
WORKER_CRASH_WINDOW = 60  # seconds
WORKER_RESTART_BACKOFF = 1.0  # seconds, times the number of recent crashes

log = logging.getLogger("tocsin.worker")


# The worker command's broker argument: the worker's bootstrap, which imports every actor
# (the worker runs only the actors its command imports) and installs their broker.
WORKER_BROKER = "tocsin.boot.worker:boot"
IDLE_POLL = "dramatiq_worker_timeout"  # Dramatiq reads this variable (lower case) at import
IDLE_POLL_MS = "100"  # milliseconds an idle worker thread waits before looking at its queue again


def run_worker(processes: int, threads: int, queues: Sequence[str] = ()) -> int:
    """Run `dramatiq actors` in its own session, restart it when it dies unasked, and
    forward the first stop signal once.

    honcho signals a whole process group; if Dramatiq's worker processes received that
    signal directly as well as from their parent they would be killed mid-message.
    Dramatiq stops all its processes when one of them dies (a segfault, the OOM killer, a
    kill -9); under honcho that would stop web and clock too, so this process restarts it,
    as a process manager in production would, and gives up (non-zero) only when it keeps
    crashing at once.
    """
    from tocsin.monitoring.metrics import endpoint_environment, remove_sample_directory, sample_directory

    # It signs the unsubscribe links of every email. Only the secrets are read here: the
    # rest of the settings are Dramatiq's to read (and a bad one is a crash to restart).
    require_strong_secret(load_secrets())
    command = [sys.executable, "-m", "dramatiq", WORKER_BROKER,
               "--processes", str(processes), "--threads", str(threads)]
    if queues:  # a dedicated line (an email worker): only these; Dramatiq adds their delay queues
        command += ["--queues", *queues]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(message)s")
    # An idle consumer of the Redis broker sleeps up to this long between two looks at its
    # queue (Dramatiq's default: 1 s). An event crosses three queues on its way to the inbox
    # (relay, its product's preparation, email), so the default could add seconds to a
    # quiet system's latency; a look is one small Lua call.
    environment = {**os.environ, IDLE_POLL: os.environ.get(IDLE_POLL, IDLE_POLL_MS)}
    address = worker_metrics_address(os.environ)
    if address is None:
        return _supervise(command, environment)
    samples = sample_directory()
    log.info("metrics on http://%s:%d/", *address)
    try:
        return _supervise(command, {**environment, **endpoint_environment(address, samples)})
    finally:
        remove_sample_directory(samples)


def _supervise(command: list[str], environment: dict[str, str] | None) -> int:
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            if child is not None and child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    crashes: deque[float] = deque()  # time.monotonic() of each recent unasked exit
    while True:
        child = subprocess.Popen(command, start_new_session=True, env=environment)
        if stopping:  # the signal came while the child was being started
            child.send_signal(signal.SIGTERM)
        code = child.wait()
        if stopping:
            return code
        now = time.monotonic()
        crashes.append(now)
        while crashes and crashes[0] < now - WORKER_CRASH_WINDOW:
            crashes.popleft()
        if len(crashes) >= WORKER_CRASH_LIMIT:
            log.error("dramatiq exited %d times within %ds (last code %d); giving up",
                      len(crashes), WORKER_CRASH_WINDOW, code)
            return code or 1
        backoff = WORKER_RESTART_BACKOFF * len(crashes)
        log.warning("dramatiq exited unexpectedly (code %d); restarting it in %.0fs", code, backoff)
        deadline = now + backoff
        while not stopping and time.monotonic() < deadline:
            time.sleep(0.1)
        if stopping:
            return 0
        log.info("starting dramatiq again")


# The top-level Procfile, shipped inside the package: an install from the wheel has no
# checkout to find it in (tests/unit/test_packaging.py keeps the two copies equal).
PACKAGED_PROCFILE = Path(__file__).resolve().parents[1] / "Procfile"


def _procfile() -> Path:
    """The Procfile in the current folder when there is one (the checkout's, under `make
    run`), else the one shipped with the package."""
    here = Path.cwd() / "Procfile"
    return here if here.is_file() else PACKAGED_PROCFILE


def procfile_environment(base: Mapping[str, str], portal_url: str) -> dict[str, str]:
    """What every Procfile process is started with (tests/system starts them likewise)."""
    # The Procfile names `tocsin`: make sure this installation's is the one found.
    bin_dir = str(Path(sys.executable).parent)
    return {**base, "PATH": os.pathsep.join([bin_dir, base.get("PATH", "")]),
            # honcho gives every process its own PORT; the worker's email and unsubscribe
            # links must name the port the web process listens on, not the worker's own.
            "PORTAL_URL": portal_url}


def status_command(started: dict[str, str]) -> str:
    """`tocsin status` as another terminal runs it against these services: it needs the
    URLs of the embedded ones, which only this process knows."""
    named = [f"{name}={shlex.quote(started[name])}" for name in ("DATABASE_URL", "REDIS_URL")
             if name in started]
    return " ".join([*named, shlex.quote(str(Path(sys.executable).parent / "tocsin")), "status"])


def _why_no_demo(demo: bool | None) -> str:
    if demo is False:
        return "Demo tenant: not seeded (--no-demo)."
    return ("Demo tenant: not seeded: DATABASE_URL names a database tocsin up did not start "
            "(its published password must not reach it; add --demo to seed it anyway).")


def run_everything(start: Callable[[Settings], Settings], demo: bool | None = None) -> None:
    """`make run`: start what the environment does not name, migrate, seed the demo tenant
    (only into a PostgreSQL it started itself, unless ``demo`` says otherwise), then run
    web, worker and clock under honcho until Ctrl-C. ``start`` is the CLI bootstrap's
    (tocsin.boot.start): this process's settings and pool, once the services are known."""
    procfile = _procfile()
    home = Path(os.environ.get("TOCSIN_HOME", ".tocsin")).resolve()
    print(f"Starting Tocsin (state in {home}) ...", flush=True)
    services = start_embedded(home, os.environ)
    try:
        # The environment of every process started below; this process's own is not changed.
        env = {**os.environ, **services.env}
        for line in services.started:
            print(f"  started {line}", flush=True)
        # "Embedded" is known, never guessed from a URL: this process started the PostgreSQL.
        if services.started_postgres:
            env["TOCSIN_EMBEDDED"] = "1"
            if not env.get("SESSION_SECRET"):
                env["SESSION_SECRET"] = kept_session_secret(home)
        else:
            env.pop("TOCSIN_EMBEDDED", None)
        settings = start(load_settings(env))
        require_strong_secret(settings)  # before anything is written to a database we did not start
        seed = services.started_postgres if demo is None else demo
        from db.platform.migrations import migrate_all
        from tocsin.shell.demo import seed_demo

        report = migrate_all()
        print(f"  migrations: {len(report.applied)} applied", flush=True)
        if wants_local_aws(os.environ) or services.env.get("SES_ENDPOINT_URL"):
            from tocsin.monitoring.ops_alerts import prepare_local_aws

            for name, value in prepare_local_aws(settings).items():
                env.setdefault(name, value)  # an operator's own topics win
        demo_lines = list(seed_demo()) if seed else [_why_no_demo(demo)]
        honcho = shutil.which("honcho") or str(Path(sys.executable).parent / "honcho")
        print("", flush=True)
        print(f"  Portal:  {settings.portal_url}/", flush=True)
        for line in demo_lines:
            print(f"  {line}", flush=True)
        if settings.ses_endpoint_url:
            print(f"  Sent email (local SES): {settings.ses_endpoint_url}/moto-api/data.json",
                  flush=True)
        if services.local_maildir is not None:
            print(f"  Failover email (local SMTP): {services.local_maildir}/new", flush=True)
        print(f"  Status:  {status_command(services.env)}", flush=True)
        # From the banner on, Ctrl-C stops the processes in order instead of interrupting
        # this one: one that comes before honcho has started is handed to it once it has.
        asked: list[int] = []
        signal.signal(signal.SIGINT, lambda s, f: asked.append(s))
        signal.signal(signal.SIGTERM, lambda s, f: asked.append(s))
        print("  Press Ctrl-C to stop everything.\n", flush=True)
        env = procfile_environment(env, settings.portal_url)
        process = subprocess.Popen(
            # honcho hands PORT to each process from its base port; web is first in the
            # Procfile, so it gets the port the banner printed.
            [honcho, "start", "-f", str(procfile), "-d", str(Path.cwd()),
             "-p", str(settings.web_port)],
            env=env,
        )
        # Ctrl-C reaches honcho too (same terminal); let it stop its processes in order.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, lambda s, f: process.send_signal(signal.SIGTERM))
        if asked:
            process.send_signal(signal.SIGTERM)
        process.wait()
    finally:
        print("Stopping embedded services ...", flush=True)
        services.stop()
        print("Stopped.", flush=True)
