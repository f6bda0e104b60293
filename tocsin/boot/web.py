"""The web process's bootstrap: `tocsin web` (the Procfile's web line) runs the portal under
uvicorn; `tocsin.boot.web:app` is the same portal for an ASGI server's factory mode."""

from __future__ import annotations

from litestar import Litestar

from portal.app import create_app
from portal.redaction import install_log_redaction
from portal.settings import PortalSettings
from tocsin import boot
from tocsin.core.keys import require_strong_secret
from tocsin.core.settings import Settings, load_settings

__all__ = ["WEB_GRACEFUL_SHUTDOWN", "app", "build_app", "run_web"]

# Seconds a stopping web process waits for open requests: open inbox event streams never
# finish by themselves, and their browsers reconnect to the next process anyway.
WEB_GRACEFUL_SHUTDOWN = 5


def build_app(settings: Settings | None = None, portal_settings: PortalSettings | None = None,
              *, describe_portal: bool = False) -> Litestar:
    """Start this process with ``settings`` (read from the environment when not given):
    the pool, the broker and the after-commit effects (renewals and invitations hand their
    emails to the workers once they commit), then build the portal."""
    settings = boot.start(settings or load_settings())
    boot.start_messaging(settings)
    return create_app(settings, portal_settings, describe_portal=describe_portal)


def app() -> Litestar:
    """The factory of an ASGI server's factory mode (uvicorn --factory tocsin.boot.web:app)."""
    return build_app()


def run_web() -> None:
    import uvicorn

    settings = load_settings()  # once for the process: the app is built from these
    require_strong_secret(settings)  # one line and exit 2 (tocsin.shell.cli), before any socket opens
    install_log_redaction()  # before uvicorn logs its first line
    # uvicorn's own proxy headers off: it would believe X-Forwarded-For from 127.0.0.1 by
    # default; the portal reads the header only from TRUSTED_PROXIES (portal.client_address).
    web = build_app(settings)
    # The modules, templates and app built at start-up live as long as the process: kept out
    # of the collector's generations, so a full collection (every few batches of events, whose
    # 500 events are ~50,000 objects) no longer walks them all (a fifth of a batch's CPU).
    boot.tune_collector()
    uvicorn.run(
        web, host=settings.web_host, port=settings.web_port,
        log_level="info", proxy_headers=False, timeout_graceful_shutdown=WEB_GRACEFUL_SHUTDOWN,
    )
