"""The portal's application factory: `uvicorn portal.app:create_app --factory`.

Everything is built here from the settings, never at import time: the Redis session store,
the CSRF secret, the template environment.
"""

from __future__ import annotations

from pathlib import Path

from litestar import Litestar, Router
from litestar.config.csrf import CSRFConfig
from litestar.datastructures import CacheControlHeader, ResponseHeader, State
from litestar.di import Provide
from litestar.plugins.htmx import HTMXPlugin
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig
from prometheus_client.registry import CollectorRegistry
from redis.asyncio import BlockingConnectionPool
from redis.asyncio import Redis as AsyncRedis

from db.evidence.export_budget import ExportBudget
from portal.auth import ANY_QUERY, PUBLIC, provide_viewer, requires_login
from portal.errors import exception_handlers
from portal.http_latency import HttpLatency
from portal.live import InboxListener
from portal.metrics import WebCollector
from portal.openapi import api_documentation
from portal.ratelimit import ApiKeyFailures, ApiKeyRateLimit, LoginThrottle, PasswordChecks
from portal.redaction import install_log_redaction
from portal.routes import (
    api_keys,
    audit,
    brand,
    branding,
    chat,
    client_admin,
    client_import,
    email_failover,
    email_templates,
    events_api,
    evidence,
    evidence_chain,
    health,
    hooks,
    inbox,
    licences,
    live,
    login,
    manual_subjects,
    members,
    metrics,
    obligations,
    preferences,
    rule_builder,
    rule_dry_run,
    rules,
    subject_import,
    tenant_settings,
    texts,
    unsubscribe,
    webhooks,
)
from portal.sessions import STORE, SessionStore, session_config
from portal.settings import PortalSettings, load_portal_settings
from portal.templating import build_environment
from tocsin.core import runtime
from tocsin.core.keys import signing_keys
from tocsin.core.settings import Settings
from tocsin.messaging.queues import QueueInspector

__all__ = [
    "APP_NAME",
    "CONTENT_SECURITY_POLICY",
    "HSTS",
    "REDIS_CONNECTIONS",
    "REDIS_WAIT_SECONDS",
    "REQUEST_MAX_BODY_BYTES",
    "STATIC",
    "STATIC_MAX_AGE",
    "create_app",
]

# static/ sits next to portal/ in the checkout and, installed from the wheel, in site-packages
# (pyproject.toml ships it): the one beside this portal, never some other folder on sys.path.
STATIC = Path(__file__).resolve().parent.parent / "static"
STATIC_MAX_AGE = 60 * 60  # seconds browsers may reuse a static file without asking
REDIS_CONNECTIONS = 32  # per process, shared by every request reading its session
REDIS_WAIT_SECONDS = 5  # a request waits this long for a Redis connection before failing
APP_NAME = "Tocsin"
# bytes a request body may hold: the portal's forms are a few hundred bytes; more is refused
# with 413 before it is read (the SES hook, whose SNS envelopes are larger, has its own).
REQUEST_MAX_BODY_BYTES = 64 * 1024

# What the browser may do with our pages: our own scripts and styles only (htmx attributes
# are not inline scripts), no framing, forms post only back to us.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)
# Behind https (PORTAL_URL), browsers must never fall back to http for this host.
HSTS = "max-age=31536000"  # seconds: one year


def create_app(
    settings: Settings | None = None, portal_settings: PortalSettings | None = None,
    *, describe_portal: bool = False,
) -> Litestar:
    """The portal. Its OpenAPI schema (portal.openapi, served at /schema) describes the
    events API; with `describe_portal` the HTML routes as well, for the fuzz tests."""
    install_log_redaction()  # however the app is served: tokens in paths never reach a log
    # The process's settings (tocsin/boot/web.py started it with them), handed down:
    # handlers read request.app.state.settings (portal.settings.app_settings).
    settings = settings or runtime.settings()
    keys = signing_keys(settings)  # refuses the published default outside the embedded services
    portal_settings = portal_settings or load_portal_settings(settings.portal_url)
    environment = build_environment(
        {"app_name": APP_NAME, "poll_seconds": portal_settings.inbox_poll_seconds,
         "live_push": portal_settings.live_push}
    )
    # A bounded pool that waits for a free connection: redis-py's default pool raises "Too
    # many connections" once 100 requests of one process read their session at once.
    redis_pool = BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=REDIS_CONNECTIONS, timeout=REDIS_WAIT_SECONDS
    )
    sessions = SessionStore(
        AsyncRedis(connection_pool=redis_pool), settings.dramatiq_namespace, keys.session,
        idle_seconds=settings.session_idle_seconds, absolute_seconds=settings.session_absolute_seconds,
    )
    secure_headers = [ResponseHeader(name="Strict-Transport-Security", value=HSTS)] \
        if portal_settings.secure_cookies else []
    listener = InboxListener(
        settings.redis_url, settings.dramatiq_namespace,
        per_user=portal_settings.inbox_streams_per_user,
        per_process=portal_settings.inbox_streams_per_process,
    )
    # Depths from the broker the settings select (RabbitMQ's own counts when BROKER_URL is set).
    inspector = QueueInspector.for_settings(settings)
    metrics_registry = CollectorRegistry()
    metrics_registry.register(WebCollector(
        inspector, listener, sweep_interval_seconds=settings.sweep_interval_seconds,
        database_seconds=portal_settings.metrics_database_seconds))
    exports = ExportBudget(
        # A read replica when one is set: an export only reads, and may read for minutes.
        portal_settings.evidence_database_url or settings.database_url,
        connections=portal_settings.export_connections,
        per_tenant=portal_settings.exports_per_tenant,
        statement_seconds=portal_settings.export_statement_seconds,
        idle_seconds=portal_settings.export_seconds,
    )
    return Litestar(
        route_handlers=[Router("/", include_in_schema=describe_portal, route_handlers=[
            login.login_page, login.login, login.logout,
            inbox.inbox, inbox.older_notifications, inbox.newer_notifications, inbox.unread_badge,
            inbox.change_notification, inbox.read_everything, live.inbox_stream,
            licences.my_licence, licences.clients, licences.client_licence, licences.wall,
            licences.renew_own_licence, licences.renew_client_licence,
            members.members, members.invite, members.change_role, members.deactivate_member,
            members.invitation_page, members.join,
            evidence.ledger, evidence.ledger_csv, evidence.needs_attention,
            evidence.send_again, evidence.mark_delivered, *tenant_settings.ROUTES,
            health.readyz, health.healthz, metrics.metrics, hooks.ses_events,
            *preferences.ROUTES, *unsubscribe.ROUTES, *api_keys.ROUTES, *obligations.ROUTES,
            *rules.ROUTES, *rule_builder.ROUTES, *rule_dry_run.ROUTES, *webhooks.ROUTES, *chat.ROUTES,
            *audit.ROUTES, *client_admin.ROUTES, *manual_subjects.ROUTES,
            *client_import.ROUTES, *subject_import.ROUTES, *evidence_chain.ROUTES, *brand.ROUTES,
            *branding.ROUTES, *email_templates.ROUTES,
            *texts.ROUTES,
            *email_failover.ROUTES,
            create_static_files_router(
                path="/static", directories=[STATIC], opt={PUBLIC: True, ANY_QUERY: True},
                cache_control=CacheControlHeader(max_age=STATIC_MAX_AGE),
            ),
        ]), events_api.router],
        guards=[requires_login],
        dependencies={"viewer": Provide(provide_viewer, sync_to_thread=False)},
        middleware=[HttpLatency,  # first: it sees the status the exception handlers chose
                    session_config(secure=portal_settings.secure_cookies,
                                   idle_seconds=settings.session_idle_seconds).middleware],
        state=State({"settings": settings, "portal_settings": portal_settings,
                     "inbox_listener": listener, "export_budget": exports,
                     "signing_keys": keys, STORE: sessions,
                     "login_throttle": LoginThrottle.from_url(settings.redis_url),
                     "queue_inspector": inspector, "metrics_registry": metrics_registry,
                     events_api.RATE_LIMIT: ApiKeyRateLimit.from_url(
                         settings.redis_url, settings.dramatiq_namespace,
                         portal_settings.api_events_per_minute,
                         portal_settings.api_tenant_events_per_minute),
                     events_api.KEY_FAILURES: ApiKeyFailures.from_url(
                         settings.redis_url, settings.dramatiq_namespace),
                     "password_checks": PasswordChecks(
                         portal_settings.password_checks_at_once,
                         portal_settings.password_check_wait_seconds)}),
        on_shutdown=[listener.close, exports.close, sessions.redis.aclose, redis_pool.disconnect],
        request_max_body_size=REQUEST_MAX_BODY_BYTES,
        csrf_config=CSRFConfig(
            secret=keys.csrf.current.hex(),
            cookie_name="tocsin_csrf",
            cookie_secure=portal_settings.secure_cookies,
            cookie_httponly=True,  # the token reaches forms and htmx through the page itself
            cookie_samesite="lax",
            # Read-only, and never needing a token: skipping them avoids a cookie per asset.
            # /hooks/ is called by AWS and authenticated by the SNS signature; /unsubscribe/
            # by its signed token (RFC 8058 one-click: a mail client posts, with no cookie);
            # /api/ by its bearer API key (no cookie is ever involved).
            exclude=["^/static/", "^/(healthz|readyz|metrics)$", "^/hooks/", "^/unsubscribe/", "^/api/"],
        ),
        template_config=TemplateConfig(
            instance=JinjaTemplateEngine.from_environment(environment)
        ),
        plugins=[HTMXPlugin()],
        exception_handlers=exception_handlers,
        cache_control=CacheControlHeader(no_store=True),
        response_headers=[
            ResponseHeader(name="Content-Security-Policy", value=CONTENT_SECURITY_POLICY),
            ResponseHeader(name="X-Content-Type-Options", value="nosniff"),
            ResponseHeader(name="Referrer-Policy", value="same-origin"),
            *secure_headers,
        ],
        openapi_config=api_documentation(describe_portal=describe_portal),
        debug=False,
    )
