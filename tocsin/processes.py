"""The processes of the Procfile, and `tocsin up`, which runs them all on embedded services."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

from tocsin.config import load_settings
from tocsin.services import start_embedded, wants_local_aws

# Seconds a stopping web process waits for open requests: open inbox event streams never
# finish by themselves, and their browsers reconnect to the next process anyway.
WEB_GRACEFUL_SHUTDOWN = 5


def run_web() -> None:
    import uvicorn

    from portal.redaction import install_log_redaction

    settings = load_settings()
    install_log_redaction()  # before uvicorn logs its first line
    uvicorn.run(
        "portal.app:create_app", factory=True, host=settings.web_host, port=settings.web_port,
        log_level="info", proxy_headers=True, timeout_graceful_shutdown=WEB_GRACEFUL_SHUTDOWN,
    )


def run_worker(processes: int, threads: int) -> int:
    """Run `dramatiq actors` in its own session and forward the first stop signal once.

    honcho signals a whole process group; if Dramatiq's worker processes received that
    signal directly as well as from their parent they would be killed mid-message.
    """
    command = [sys.executable, "-m", "dramatiq", "actors",
               "--processes", str(processes), "--threads", str(threads)]
    child = subprocess.Popen(command, start_new_session=True)
    forwarded = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal forwarded
        if not forwarded and child.poll() is None:
            forwarded = True
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    return child.wait()


def _procfile() -> Path:
    for candidate in (Path.cwd() / "Procfile", Path(__file__).resolve().parent.parent / "Procfile"):
        if candidate.exists():
            return candidate
    raise SystemExit("tocsin: error: no Procfile found; run `tocsin up` from the project folder")


def run_everything(seed: bool = True) -> None:
    """`make run`: start what the environment does not name, migrate, seed the demo
    tenant, then run web, worker and clock under honcho until Ctrl-C."""
    procfile = _procfile()
    home = Path(os.environ.get("TOCSIN_HOME", ".tocsin")).resolve()
    print(f"Starting Tocsin (state in {home}) ...", flush=True)
    services = start_embedded(home, os.environ)
    try:
        os.environ.update(services.env)
        for line in services.started:
            print(f"  started {line}", flush=True)
        settings = load_settings()
        from db.migrations import migrate_all
        from tocsin.demo import seed_demo

        report = migrate_all()
        print(f"  migrations: {len(report.applied)} applied", flush=True)
        if wants_local_aws(os.environ) or services.env.get("SES_ENDPOINT_URL"):
            from actors.ops import prepare_local_aws

            for name, value in prepare_local_aws(settings).items():
                os.environ.setdefault(name, value)
        demo_lines = list(seed_demo()) if seed else []
        honcho = shutil.which("honcho") or str(Path(sys.executable).parent / "honcho")
        print("", flush=True)
        print(f"  Portal:  {settings.portal_url}/", flush=True)
        for line in demo_lines:
            print(f"  {line}", flush=True)
        if settings.ses_endpoint_url:
            print(f"  Sent email (local SES): {settings.ses_endpoint_url}/moto-api/data.json",
                  flush=True)
        print("  Press Ctrl-C to stop everything.\n", flush=True)
        # The Procfile names `tocsin`: make sure this installation's is the one found.
        bin_dir = str(Path(sys.executable).parent)
        env = {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
               # honcho gives every process its own PORT; the worker's email and unsubscribe
               # links must name the port the web process listens on, not the worker's own.
               "PORTAL_URL": settings.portal_url}
        process = subprocess.Popen(
            # honcho hands PORT to each process from its base port; web is first in the
            # Procfile, so it gets the port the banner printed.
            [honcho, "start", "-f", str(procfile), "-d", str(procfile.parent),
             "-p", str(settings.web_port)],
            env=env,
        )
        # Ctrl-C reaches honcho too (same terminal); let it stop its processes in order.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, lambda s, f: process.send_signal(signal.SIGTERM))
        process.wait()
    finally:
        print("Stopping embedded services ...", flush=True)
        services.stop()
        print("Stopped.", flush=True)
