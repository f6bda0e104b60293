"""The `tocsin` command. Errors map to exit codes here and only here: bad input prints one
line on stderr and exits 2 having written nothing; an unreachable service exits 1; `tocsin
status` exits 3 when the machinery is degraded."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, timedelta
from typing import NoReturn, Protocol

from domain.delivery.states import UnknownPolicy
from domain.errors import TocsinError
from domain.people.identity import (
    parse_date,
    parse_instant,
    valid_email,
    valid_plan,
    valid_role,
    valid_slug,
    valid_zone,
)
from tocsin.core.clock import utcnow
from tocsin.core.settings import ConfigError, Settings

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_DEGRADED",
    "EXIT_UNAVAILABLE",
    "SELF_STARTING",
    "UNKNOWN_OUTCOME_TRADE_OFF",
    "Bootstrap",
    "Parser",
    "build_parser",
    "cmd_client_create",
    "cmd_clock",
    "cmd_demo_events",
    "cmd_events_status",
    "cmd_ledger",
    "cmd_migrate",
    "cmd_scan",
    "cmd_seed_demo",
    "cmd_status",
    "cmd_stuck",
    "cmd_sweep",
    "cmd_tenant_create",
    "cmd_tenant_list",
    "cmd_tenant_password_sign_in",
    "cmd_tenant_unknown_outcome",
    "cmd_up",
    "cmd_user_create",
    "cmd_web",
    "cmd_worker",
    "main",
    "positive_count",
    "queue_name",
]

EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 1
EXIT_DEGRADED = 3  # `tocsin status`: a queue has no live consumer or a tenant's sweep is overdue
EXIT_MIGRATION_FAILED = 4  # `tocsin migrate`: a tenant's migration failed (named on stderr)


class Bootstrap(Protocol):
    """What the CLI needs of its process's bootstrap (tocsin/boot/cli.py implements it):
    the shell sits below the bootstrap and is handed it, never imports it."""

    def start(self, settings: Settings) -> Settings: ...  # the settings and the pool
    def start_messaging(self, settings: Settings) -> None: ...  # the broker and the effects
    def run_web(self) -> None: ...
    def run_clock(self) -> None: ...


class _NotBooted:
    def _refuse(self, *args: object) -> NoReturn:
        raise RuntimeError("the tocsin command starts through its bootstrap (tocsin.boot.cli:main)")

    start = start_messaging = run_web = run_clock = _refuse


_boot: Bootstrap = _NotBooted()
# The commands that start their own process (or none): every other one opens the database.
SELF_STARTING = frozenset({"up", "web", "worker", "clock", "demo-events"})


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"tocsin: error: {message} (see `{self.prog} --help`)\n")


def positive_count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def queue_name(text: str) -> str:
    """A queue the product's actors use, or a product's own preparation queue."""
    from domain.delivery.preparation_queues import QUEUE_PREFIX, parse_product_queues
    from tocsin.messaging.queues import PRODUCT_QUEUES

    if text in PRODUCT_QUEUES:
        return text
    if text.startswith(QUEUE_PREFIX):
        try:
            parse_product_queues(text.removeprefix(QUEUE_PREFIX))
            return text
        except TocsinError:
            pass
    raise argparse.ArgumentTypeError(f"{text!r} is not a queue (one of {', '.join(PRODUCT_QUEUES)}, "
                                     "or prepare_<product>)")


def _out(line: str = "") -> None:
    print(line, flush=True)


# --- commands -------------------------------------------------------------------------


def cmd_migrate(args: argparse.Namespace) -> None:
    from db.platform.migrations import SchemaMigrated, TenantMigrationFailed, migrate_all
    from tocsin.shell.progress import ProgressLine

    # On stderr: stdout keeps the summary a script may read.
    progress: ProgressLine | None = None
    migrated = 0

    def started(total: int) -> None:
        nonlocal progress
        if total:
            progress = ProgressLine("migrating tenant schemas", total, sys.stderr)

    def schema_done(step: SchemaMigrated) -> None:
        nonlocal migrated
        migrated = step.done
        if progress is not None:
            progress.update(step.done)

    try:
        report = migrate_all(on_schema=schema_done, on_start=started, jobs=args.jobs)
    except TenantMigrationFailed as error:
        if progress is not None:
            progress.finish()
        print(f"tocsin: error: {_one_line(error)}", file=sys.stderr)
        print(f"{migrated:,} tenant schema(s) migrated by this run; every other schema is "
              "untouched. Fix the cause and run `tocsin migrate` again to continue",
              file=sys.stderr, flush=True)
        sys.exit(EXIT_MIGRATION_FAILED)
    except KeyboardInterrupt:
        if progress is not None:
            progress.finish()
            # Each schema commits on its own: what is done stays done.
            print(f"interrupted after {migrated:,} of {progress.total:,} tenant schemas; "
                  "run `tocsin migrate` again to continue", file=sys.stderr, flush=True)
        raise
    if progress is not None:
        progress.finish()
    for schema, version in report.applied:
        if schema == "control":
            _out(f"applied {version} to control")
    if not report.applied:
        _out("Database is up to date; nothing to apply.")
    elif migrated:
        versions = sorted({v for s, v in report.applied if s != "control"})
        _out(f"migrated {migrated:,} tenant schema(s): applied {', '.join(versions)}")


def cmd_tenant_create(args: argparse.Namespace) -> None:
    from db.platform.tenancy import create_tenant

    slug, zone = valid_slug(args.slug), valid_zone(args.tz)
    tenant = create_tenant(slug, args.name, zone)
    _out(f"created tenant {tenant.slug} ({tenant.name}) in schema {tenant.schema}, zone {zone}")


def cmd_tenant_list(args: argparse.Namespace) -> None:
    from db.platform.tenancy import list_tenants

    tenants = list_tenants()
    if not tenants:
        _out("No tenants yet. Create one with `tocsin tenant create SLUG --name NAME --tz ZONE`.")
        return
    _out(f"{'SLUG':<20} {'ZONE':<22} {'STATUS':<10} NAME")
    for t in tenants:
        _out(f"{t.slug:<20} {t.time_zone:<22} {t.status:<10} {t.name}")


UNKNOWN_OUTCOME_TRADE_OFF = {
    "resend": "an email whose outcome is unknown is sent again (same Message-ID) when no provider "
              "event settles it: nobody misses a reminder; a recipient may get it twice",
    "hold": "an email whose outcome is unknown waits on Needs attention for an administrator "
            "(send again, or mark as delivered): no duplicate; the reminder waits for a person",
}


def cmd_tenant_unknown_outcome(args: argparse.Namespace) -> None:
    from db.platform.tenancy import get_tenant, set_unknown_outcome_policy

    slug = valid_slug(args.slug)
    if args.policy is not None:
        set_unknown_outcome_policy(slug, args.policy)
    policy = get_tenant(slug).unknown_outcome_policy
    _out(f"{slug}: unknown outcomes: {policy}{' (changed)' if args.policy else ''}")
    _out(f"  {UNKNOWN_OUTCOME_TRADE_OFF[policy]}")


def cmd_tenant_password_sign_in(args: argparse.Namespace) -> None:
    """The operator's way back in when a tenant's single sign-on provider fails while
    password sign-in is off (turning it off again needs single sign-on set up)."""
    from db.people.sign_in_settings import set_password_sign_in, sign_in_settings
    from db.platform.tenancy import tenant_tx

    slug = valid_slug(args.slug)
    with tenant_tx(slug) as tx:
        if args.state is not None:
            set_password_sign_in(tx, args.state == "on")
        enabled = sign_in_settings(tx).password_enabled
    _out(f"{slug}: password sign-in {'on' if enabled else 'off'}{' (changed)' if args.state else ''}")


def cmd_client_create(args: argparse.Namespace) -> None:
    from db.people.clients import create_client
    from db.platform.tenancy import tenant_tx

    slug, expires, plan = valid_slug(args.tenant), parse_date(args.expires), valid_plan(args.plan)
    zone = valid_zone(args.tz) if args.tz else None
    with tenant_tx(slug) as tx:
        client = create_client(tx, args.name, expires, plan, zone)
    _out(f"created client {client.id} ({client.name}), {client.plan}, access until "
         f"{client.access_expires_on.isoformat()}")


def cmd_user_create(args: argparse.Namespace) -> None:
    from db.people.users import create_user, generate_password
    from db.platform.tenancy import tenant_tx

    slug, email, role = valid_slug(args.tenant), valid_email(args.email), valid_role(args.role)
    password = args.password or generate_password()
    with tenant_tx(slug) as tx:
        user = create_user(tx, email, role, password, client_id=args.client, display_name=args.name)
    _out(f"created {user.role.value} {user.email} (id {user.id}) in tenant {slug}")
    if not args.password:
        _out(f"password: {password}")


def cmd_seed_demo(args: argparse.Namespace) -> None:
    from tocsin.shell.demo import seed_demo

    for line in seed_demo():
        _out(line)


def cmd_demo_events(args: argparse.Namespace) -> None:
    import httpx

    from tocsin.core import runtime
    from tocsin.shell.client import TocsinApiError
    from tocsin.shell.demo_fraud import DEMO_API_KEY, send_demo_events

    url = args.url or runtime.settings().portal_url
    try:
        for line in send_demo_events(url, args.key or DEMO_API_KEY):
            _out(line)
    except httpx.TransportError as error:
        print(f"tocsin: error: the portal at {url} did not answer ({error}); is `make run` running?",
              file=sys.stderr)
        sys.exit(EXIT_UNAVAILABLE)
    except TocsinApiError as error:
        print(f"tocsin: error: the events API refused the demo events: {error}", file=sys.stderr)
        sys.exit(EXIT_UNAVAILABLE)


def _chosen_tenants(slug: str | None) -> list[str]:
    """The one tenant named, or every active tenant."""
    from db.platform.tenancy import get_tenant, list_tenants

    if slug:
        return [get_tenant(valid_slug(slug)).slug]
    return [t.slug for t in list_tenants(active_only=True)]


def _messaging() -> None:
    """For a command that enqueues work: the broker and the after-commit effects."""
    from tocsin.core import runtime

    _boot.start_messaging(runtime.settings())


def cmd_scan(args: argparse.Namespace) -> None:
    from db.notices.scan import run_scan

    _messaging()

    as_of = parse_instant(args.as_of) if args.as_of else utcnow()
    slugs = _chosen_tenants(args.tenant)
    _out(f"Scanning {len(slugs)} tenant(s) as of {as_of.isoformat()}")
    for index, slug in enumerate(slugs, 1):
        r = run_scan(slug, as_of)
        c, t = r.counts, r.time
        _out(f"[{index}/{len(slugs)}] {slug}: claimed {c.claimed}, skipped {c.skipped}, "
             f"expired {c.expired}, closed {c.closed}, emails enqueued {r.enqueued}; "
             f"time rules: claimed {t.claimed}, skipped {t.skipped}, cancelled {t.cancelled}"
             + (f", failed {len(t.failed)}" if t.failed else ""))
        for failure in t.failed:
            _out(f"    failed alone (the rest of the scan went on): {failure}")


def cmd_ledger(args: argparse.Namespace) -> None:
    from db.evidence.audit import record_audit
    from db.evidence.ledger_view import LedgerFilter, csv_lines, iter_ledger
    from db.platform.tenancy import tenant_tx

    slug = valid_slug(args.tenant)
    with tenant_tx(slug) as tx:
        record_audit(tx, "export.ledger", "export", "ledger",
                     after={"format": "csv" if args.csv else "text"})
        rows = iter_ledger(tx, LedgerFilter())
        if args.csv:
            sys.stdout.writelines(csv_lines(rows))
            return
        _out(f"{'ID':>6}  {'SUBJECT':<28} {'THRESHOLD':<9} {'DUE ON':<10}  {'STATUS':<9} "
             f"{'CLAIMED (UTC)':<19}  {'DELIVERED (UTC)':<19}  EMAILS")
        count = 0
        for row in rows:
            count += 1
            subject = f"{row.subject_name or '?'} #{row.subject_id}"[:28]
            delivered = row.delivered_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") \
                if row.delivered_at else "-"
            _out(f"{row.id:>6}  {subject:<28} {row.threshold:<9} {row.due_on.isoformat():<10}  "
                 f"{row.status:<9} {row.claimed_at.astimezone(UTC):%Y-%m-%d %H:%M:%S}  "
                 f"{delivered:<19}  {row.emails_accepted}/{row.deliveries}")
        if count == 0:
            _out("(the ledger is empty: no milestone has been claimed yet)")


def cmd_sweep(args: argparse.Namespace) -> None:
    from db.delivery.sweep import run_sweep

    _messaging()

    slugs = _chosen_tenants(args.tenant)
    _out(f"Sweeping {len(slugs)} tenant(s)")
    for index, slug in enumerate(slugs, 1):
        r = run_sweep(slug)
        _out(f"[{index}/{len(slugs)}] {slug}: leases expired {r.leases.retried + r.leases.unknown} "
             f"(retry {r.leases.retried}, unknown {r.leases.unknown}, failed {r.leases.failed}), "
             f"unknown confirmed {r.reconciled.confirmed}, resent {r.reconciled.resent}, "
             f"held {r.reconciled.held}, claims repaired {r.repaired}, emails enqueued {r.enqueued}, "
             f"alerts raised {r.alerts_raised}"
             + (", alerts published after the sweep" if r.alerts_waiting else ""))


def cmd_stuck(args: argparse.Namespace) -> None:
    from datetime import timedelta

    from db.evidence.ledger_view import stuck_claims
    from db.platform.tenancy import tenant_tx

    grace = timedelta(minutes=args.older_than)
    with tenant_tx(valid_slug(args.tenant)) as tx:
        stuck = stuck_claims(tx, grace)
    if not stuck:
        _out(f"No stuck claims: every claim older than {args.older_than} minutes was delivered "
             "or is waiting on purpose (quiet hours, a digest).")
        return
    _out(f"{len(stuck)} claim(s) older than {args.older_than} minutes, not delivered and not waiting "
         "on purpose:")
    _out(f"{'LEDGER':>7}  {'RULE':<8} {'SUBJECT':<24} {'THRESHOLD':<9} {'DUE ON':<10}  "
         f"{'CLAIMED (UTC)':<16}  EMAILS WAITING")
    for s in stuck:
        subject = f"{s.subject_name or s.subject_kind} #{s.subject_id}"[:24]
        _out(f"{s.ledger_id:>7}  {s.rule:<8} {subject:<24} {s.threshold:<9} {s.due_on.isoformat():<10}  "
             f"{s.claimed_at.astimezone(UTC):%Y-%m-%d %H:%M}  {s.waiting}/{s.deliveries}")


def _age(delta: timedelta | float | None) -> str:
    """A duration as an operator reads it: 42s, 4m 05s, 2h 03m, 3d 04h."""
    if delta is None:
        return "-"
    seconds = int(delta.total_seconds() if isinstance(delta, timedelta) else delta)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600:02d}h"


def _ago(delta: timedelta | None) -> str:
    return "never" if delta is None else f"{_age(delta)} ago"


def cmd_status(args: argparse.Namespace) -> None:
    from domain.liveness import OVERDUE_GRACE_SECONDS, OVERDUE_INTERVALS, RunKind
    from tocsin.core import runtime
    from tocsin.core.settings import redact_password
    from tocsin.messaging.queues import QueueInspector
    from tocsin.monitoring.status import machinery_status

    settings = runtime.settings()
    slug = _chosen_tenants(args.tenant)[0] if args.tenant else None  # an unknown one is bad input
    inspector = QueueInspector.for_settings(settings)
    status = machinery_status(inspector, settings.sweep_interval_seconds, slug, discover_queues=True)
    if settings.broker_url is None:
        _out(f"Queues (Redis namespace {settings.dramatiq_namespace!r}; OLDEST is the age of the next "
             "ready message)")
    else:
        _out(f"Queues (RabbitMQ {redact_password(settings.broker_url)}; OLDEST is unknown: RabbitMQ "
             "shows a message only by delivering it)")
    width = max([16, *(len(q.name) for q in status.queues)])
    _out(f"{'QUEUE':<{width}} {'READY':>7} {'DELAYED':>7}  {'OLDEST':<9} {'CONSUMERS':>9}")
    for q in status.queues:
        flag = "  NO CONSUMER" if q.unconsumed else ""
        oldest = "unknown" if q.oldest_age_seconds is None and q.ready and settings.broker_url \
            else _age(q.oldest_age_seconds)
        _out(f"{q.name:<{width}} {q.ready:>7} {q.delayed:>7}  {oldest:<9} "
             f"{q.consumers:>9}{flag}")
    _out()
    _out(f"Tenants (a sweep is overdue after {_age(status.sweep_overdue_after)}: {OVERDUE_INTERVALS} "
         f"sweep intervals of {settings.sweep_interval_seconds}s, plus {OVERDUE_GRACE_SECONDS}s)")
    if not status.tenants:
        _out("(no active tenant" + (f" named {slug!r})" if slug else ")"))
    else:
        _out(f"{'TENANT':<20} {'LAST SCAN':<12} {'LAST SWEEP':<12} {'LAST DIGEST'}")
        for t in status.tenants:
            ages = [_ago(t.age(kind)) for kind in (RunKind.SCAN, RunKind.SWEEP, RunKind.DIGEST)]
            flag = "  SWEEP OVERDUE" if t.sweep_overdue else ""
            _out(f"{t.slug:<20} {ages[0]:<12} {ages[1]:<12} {ages[2]:<12}{flag}".rstrip())
    _out()
    if status.ok:
        _out("ok: every queue has a live consumer and every tenant was swept recently")
        return
    _out(f"degraded ({len(status.problems)} problem(s)):")
    for problem in status.problems:
        _out(f"  - {problem}")
    sys.exit(EXIT_DEGRADED)


def cmd_events_status(args: argparse.Namespace) -> None:
    from db.events.relay import backlog
    from db.platform.tenancy import get_tenant, list_tenants

    tenants = [get_tenant(valid_slug(args.tenant))] if args.tenant else list_tenants(active_only=True)
    rows = backlog(tenants)
    if not rows:
        _out(f"No events waiting or failed in {len(tenants)} tenant(s).")
        return
    _out(f"{'TENANT':<24} {'PRODUCT':<14} {'PENDING':>8} {'IN FLIGHT':>9} {'FAILED':>7}  OLDEST WAITING")
    for r in rows:
        _out(f"{r.tenant:<24} {r.product:<14} {r.pending:>8} {r.processing:>9} {r.failed:>7}  "
             f"{_age(r.age) if r.age is not None else '-'}")


def cmd_up(args: argparse.Namespace) -> None:
    from tocsin.shell.processes import run_everything

    run_everything(_boot.start, demo=args.demo)


def cmd_web(args: argparse.Namespace) -> None:
    _boot.run_web()


def cmd_worker(args: argparse.Namespace) -> None:
    from tocsin.shell.processes import run_worker

    sys.exit(run_worker(args.processes, args.threads, args.queues or ()))


def cmd_clock(args: argparse.Namespace) -> None:
    _boot.run_clock()


# --- parser ---------------------------------------------------------------------------


def build_parser() -> Parser:
    parser = Parser(prog="tocsin", description="Tocsin: compliance notifications, exactly once.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    def command(name: str, handler: Callable[[argparse.Namespace], None], help: str,
                parent: argparse._SubParsersAction[Parser] = sub) -> Parser:
        p = parent.add_parser(name, help=help, description=help)
        p.set_defaults(handler=handler)
        return p

    p = command("migrate", cmd_migrate, "apply pending migrations to the control and tenant schemas")
    p.add_argument("--jobs", type=_jobs, default=1,
                   help="tenant schemas migrated at once, each on its own connection (default 1)")

    tenant = sub.add_parser("tenant", help="create and list tenants")
    tenant_sub = tenant.add_subparsers(dest="tenant_command", required=True, parser_class=Parser)
    p = command("create", cmd_tenant_create, "create a tenant and its schema", tenant_sub)
    p.add_argument("slug")
    p.add_argument("--name", required=True)
    p.add_argument("--tz", required=True, help="default IANA time zone, e.g. Europe/London")
    command("list", cmd_tenant_list, "list tenants", tenant_sub)
    p = command("unknown-outcome", cmd_tenant_unknown_outcome,
                "show or set what happens to an email whose outcome is unknown: resend it "
                "(default) or hold it for an administrator", tenant_sub)
    p.add_argument("slug")
    p.add_argument("policy", nargs="?", choices=[policy.value for policy in UnknownPolicy],
                   help="resend: sent again with the same Message-ID; hold: waits on Needs attention")
    p = command("password-sign-in", cmd_tenant_password_sign_in,
                "show or set whether the tenant's people may sign in with a password (off only "
                "while single sign-on is set up)", tenant_sub)
    p.add_argument("slug")
    p.add_argument("state", nargs="?", choices=["on", "off"])

    client = sub.add_parser("client", help="create client organisations")
    client_sub = client.add_subparsers(dest="client_command", required=True, parser_class=Parser)
    p = command("create", cmd_client_create, "create a client with an annual licence", client_sub)
    p.add_argument("--tenant", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--expires", required=True, help="access expiry date, YYYY-MM-DD")
    p.add_argument("--plan", default="standard", help="standard (default) or enterprise")
    p.add_argument("--tz", help="the client's IANA time zone (default: the tenant's)")

    user = sub.add_parser("user", help="create users")
    user_sub = user.add_subparsers(dest="user_command", required=True, parser_class=Parser)
    p = command("create", cmd_user_create, "create a user", user_sub)
    p.add_argument("--tenant", required=True)
    p.add_argument("--email", required=True)
    p.add_argument("--role", required=True, help="admin, member or client_user")
    p.add_argument("--client", type=int, help="client id (client_user only)")
    p.add_argument("--password", help="at least 8 characters (default: generated and printed)")
    p.add_argument("--name", default="", help="display name")

    command("seed-demo", cmd_seed_demo, "create the demo tenant, clients and users (idempotent)")
    p = command("demo-events", cmd_demo_events,
                "send a few fraud cases to the running portal's events API with the demo key")
    p.add_argument("--url", help="the portal (default: PORTAL_URL)")
    p.add_argument("--key", help="an API key (default: the demo tenant's published key)")

    p = command("scan", cmd_scan,
                "claim due licence milestones and time-rule obligations now and enqueue their emails")
    p.add_argument("--tenant", help="one tenant (default: every active tenant)")
    p.add_argument("--as-of", help="ISO-8601 instant with offset (default: now)")

    p = command("ledger", cmd_ledger, "print a tenant's notification ledger")
    p.add_argument("--tenant", required=True)
    p.add_argument("--csv", action="store_true", help="CSV on stdout")

    p = command("sweep", cmd_sweep,
                "recover from Postgres state: expired leases, unknown outcomes, unsent work, alerts")
    p.add_argument("--tenant", help="one tenant (default: every active tenant)")

    p = command("stuck", cmd_stuck, "list claims not delivered after a grace period, not waiting on purpose")
    p.add_argument("--tenant", required=True)
    p.add_argument("--older-than", type=positive_count, default=30, metavar="MINUTES",
                   help="grace period in minutes (default 30)")

    p = command("status", cmd_status,
                "is the machinery running? queues (depth, oldest message, live consumers) and each "
                f"tenant's last scan and sweep; exit {EXIT_DEGRADED} when a queue has no consumer "
                "or a sweep is overdue")
    p.add_argument("--tenant", help="judge one tenant's sweep (default: every active tenant)")

    events = sub.add_parser("events", help="the events outbox")
    events_sub = events.add_subparsers(dest="events_command", required=True, parser_class=Parser)
    p = command("status", cmd_events_status,
                "backlog per tenant and product: events waiting, in flight and failed, and the "
                "oldest waiting event's age", events_sub)
    p.add_argument("--tenant", help="one tenant (default: every active tenant)")

    p = command("up", cmd_up,
                "run everything: embedded services, migrate, seed, web + worker + clock")
    demo = p.add_mutually_exclusive_group()
    demo.add_argument("--demo", dest="demo", action="store_true", default=None,
                      help="seed the demo tenant (published password) even into DATABASE_URL's database")
    demo.add_argument("--no-demo", dest="demo", action="store_false",
                      help="do not seed the demo tenant, even on the embedded PostgreSQL")
    command("web", cmd_web, "run the portal (ASGI server)")
    p = command("worker", cmd_worker, "run the Dramatiq worker (own session, signals forwarded)")
    p.add_argument("--processes", type=positive_count, default=2)
    p.add_argument("--threads", type=positive_count, default=4)
    from tocsin.messaging.queues import PRODUCT_QUEUES

    p.add_argument("--queues", nargs="+", type=queue_name, metavar="QUEUE",
                   help=f"consume only these queues (of {', '.join(PRODUCT_QUEUES)}); default: all, "
                        "e.g. a dedicated email worker on its own Procfile line")
    command("clock", cmd_clock, "enqueue the scan tick and the sweep, each on its interval")
    from tocsin.shell.cli_calendar import add_calendar_commands
    from tocsin.shell.cli_evidence import add_evidence_commands
    from tocsin.shell.cli_platform import add_platform_commands
    from tocsin.shell.cli_rules import add_rules_commands

    add_rules_commands(sub, command)
    add_calendar_commands(sub, command)
    add_platform_commands(sub, command)
    add_evidence_commands(sub, command)
    return parser


def _jobs(raw: str) -> int:
    try:
        jobs = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--jobs takes a whole number, got {raw!r}") from None
    if not 1 <= jobs <= 64:
        raise argparse.ArgumentTypeError(f"--jobs must be between 1 and 64, got {jobs}")
    return jobs


def _one_line(error: BaseException) -> str:
    """An error as one line (a message may quote input holding line breaks)."""
    return " ".join(str(error).split())


def main(argv: Sequence[str] | None, boot: Bootstrap) -> None:
    """Run one command with ``boot`` as its process's bootstrap."""
    global _boot
    _boot = boot
    args = build_parser().parse_args(argv)
    import getpass

    from db.evidence.audit import acting_as
    from db.platform.errors import DatabaseUnavailable
    from domain.audit import Actor, ActorKind
    from tocsin.core import runtime
    from tocsin.messaging.queues import QueuesUnavailable
    from tocsin.shell.services import ServiceError

    try:
        if args.command not in SELF_STARTING:
            boot.start(runtime.settings())  # read once; the pool opens on the first statement
        # What the command changes is recorded against the operator (db/evidence/audit.py).
        with acting_as(Actor(ActorKind.CLI, f"cli:{getpass.getuser()}")):
            args.handler(args)
    except (DatabaseUnavailable, QueuesUnavailable, ServiceError) as error:
        print(f"tocsin: error: {_one_line(error)}", file=sys.stderr)
        sys.exit(EXIT_UNAVAILABLE)
    except (TocsinError, ConfigError) as error:
        print(f"tocsin: error: {_one_line(error)}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        sys.exit(130)
