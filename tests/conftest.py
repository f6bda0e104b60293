"""Test services: real PostgreSQL, Redis and a local SES endpoint.

When DATABASE_URL / REDIS_URL are unset the embedded ones are started (as `make run`
does); set them to run against real servers. The local SES endpoint is always started
unless SES_ENDPOINT_URL names one: the suite never talks to real AWS. Each run uses its
own Dramatiq namespace, so a shared Redis carries no messages between runs. With
BROKER_URL set (`make test-rabbitmq`) the run uses a RabbitMQ vhost of its own, made for it
and deleted after it (tests/support/rabbitmq.py).

Under pytest-xdist (`make test` runs `pytest -n ...`) the controlling process starts only
PostgreSQL; each worker process makes a database of its own on it (dropped and made afresh
at every run) and starts its own Redis and local SES endpoint, since tests flush Redis,
reset the SES endpoint and count sign-in failures per address. The browser tests run on one
worker (one portal server, one Chromium), and so do the tests of each system module
(pytest_collection_modifyitems below).

The suite hashes passwords at the low cost (PASSWORD_HASH_COST=low), which the settings
accept only beside TOCSIN_TESTING=1; the PostgreSQL it starts itself skips fsync.
"""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import pytest

if TYPE_CHECKING:
    from tests.support.pgbouncer import RunningPgBouncer
    from tocsin.shell.services import EmbeddedServices

ROOT = Path(__file__).resolve().parent.parent
_services: EmbeddedServices | None = None
_rabbitmq_vhost: tuple[str, str] | None = None  # (the given BROKER_URL, this run's vhost)
_worker_database_url: tuple[str, str] | None = None  # (the server's URL, this xdist worker's database)
_pgbouncer: RunningPgBouncer | None = None  # `make test-pgbouncer`: this process's PgBouncer


def pytest_configure(config: pytest.Config) -> None:
    if _hands_tests_to_workers(config):
        _start_shared_postgres()
        return
    if not os.environ.get("TOCSIN_TEST_SERVICES_READY"):
        _start_services(os.environ.get("PYTEST_XDIST_WORKER"))
    # Fixtures that import the app (and so need the settings): registered only now.
    config.pluginmanager.import_plugin("tests.integration.portal_support")
    config.pluginmanager.import_plugin("tests.integration.sign_in_support")  # idp


def _hands_tests_to_workers(config: pytest.Config) -> bool:
    """This process is pytest-xdist's controller: it runs no test itself."""
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def _test_home() -> Path:
    return Path(os.environ.get("TOCSIN_TEST_HOME", ROOT / ".tocsin" / "test"))


def _start_shared_postgres() -> None:
    """The xdist controller's only service: the PostgreSQL its workers make databases on."""
    global _services
    # Named, so that start_embedded leaves them to the workers: each starts its own.
    _services = _start_embedded(_test_home(), {**os.environ, "REDIS_URL": "-", "SES_ENDPOINT_URL": "-"})
    os.environ.update(_services.env)


# The suite's own PostgreSQL does not wait for the disk at each commit (a third of a
# tenant's creation waited on it): only a power cut could lose what it wrote, never a crash of
# PostgreSQL (the written WAL stays in the kernel's cache), and the test that restarts
# PostgreSQL in immediate mode starts a server of its own with the defaults. It also takes
# the connections of several workers' Procfile stacks and portal servers at once.
OWN_POSTGRES = {"fsync": "off", "full_page_writes": "off", "max_connections": "400"}


def _start_embedded(home: Path, env: dict[str, str]) -> EmbeddedServices:
    """start_embedded, with the PostgreSQL it starts tuned for tests (restarted once, the
    first time, for max_connections)."""
    import psycopg
    from psycopg import sql

    from tocsin.shell.services import start_embedded

    services = start_embedded(home, env)
    if not services.started_postgres:
        return services
    with psycopg.connect(services.env["DATABASE_URL"], autocommit=True) as conn:
        before = {name: str(conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()[0])
                  for name in OWN_POSTGRES}
        for name, value in OWN_POSTGRES.items():
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
        conn.execute("SELECT pg_reload_conf()")
    if before["max_connections"] != OWN_POSTGRES["max_connections"]:  # read at start only
        services.stop()
        services = start_embedded(home, env)
    return services


def _worker_database(server: str, worker: str) -> str:
    """A database of this xdist worker's own on the shared server, empty at each run: the
    sweeps and scans of one worker's tests never see another's tenants."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(server)
    name = f"{parts.path.lstrip('/') or 'postgres'}_{worker}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return urlunsplit(parts._replace(path=f"/{name}"))


def _start_services(worker: str | None) -> None:
    global _services, _worker_database_url
    home = _test_home() if worker is None else _test_home() / worker
    env = dict(os.environ)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ROLE_ARN"):
        env.pop(name, None)
        os.environ.pop(name, None)
    _services = _start_embedded(home, env)
    os.environ.update(_services.env)
    if worker is not None:
        _worker_database_url = (os.environ["DATABASE_URL"],
                                _worker_database(os.environ["DATABASE_URL"], worker))
        os.environ["DATABASE_URL"] = _worker_database_url[1]
    if os.environ.get("TEST_PGBOUNCER"):  # `make test-pgbouncer`: the pools go through it
        from tests.support.pgbouncer import start_pgbouncer

        global _pgbouncer
        direct = os.environ["DATABASE_URL"]
        _pgbouncer = start_pgbouncer(direct, home / "pgbouncer")
        os.environ["DATABASE_URL"] = _pgbouncer.url
        os.environ["DATABASE_LISTEN_URL"] = direct  # LISTEN needs a session of its own
        os.environ["DATABASE_PREPARED_STATEMENTS"] = "0"  # PgBouncer 1.18 cannot keep them
        # The ledger export's pool sets its statement_timeout as a startup option, which
        # PgBouncer does not pass on: a direct connection (or a replica), as the docs say.
        os.environ["EVIDENCE_DATABASE_URL"] = direct
    # Cheap password hashes (a standard one costs a third of a second of a core here); the
    # settings refuse the low cost without the marker.
    os.environ["TOCSIN_TESTING"] = "1"
    os.environ.setdefault("PASSWORD_HASH_COST", "low")
    # Webhook receivers in tests listen on 127.0.0.1, which the SSRF guard refuses without it.
    os.environ.setdefault("WEBHOOK_ALLOW_PRIVATE", "1")
    # So does the single sign-on provider tests start (tests/support/oidc_provider.py).
    os.environ.setdefault("SSO_ALLOW_PRIVATE", "1")
    os.environ.setdefault("MAIL_FROM", "Tocsin Tests <notifications@tocsin.example>")
    # Tests that are about the send rate set their own limiter; the rest should not wait.
    os.environ.setdefault("SES_MAX_SEND_RATE", "1000")
    os.environ["DRAMATIQ_NAMESPACE"] = namespace = f"tocsin-test-{uuid.uuid4().hex[:8]}"
    if os.environ.get("BROKER_URL"):  # Dramatiq's RabbitMQ broker has no namespace: a vhost
        from tests.support.rabbitmq import create_vhost

        global _rabbitmq_vhost
        _rabbitmq_vhost = (os.environ["BROKER_URL"], namespace)
        os.environ["BROKER_URL"] = create_vhost(*_rabbitmq_vhost)
    # A random secret, as a deployment must have: no test passes thanks to the published
    # default, and the portal and workers run under the production policy (no TOCSIN_EMBEDDED).
    os.environ["SESSION_SECRET"] = secrets.token_urlsafe(48)
    os.environ.pop("SESSION_SECRET_PREVIOUS", None)
    os.environ.pop("TOCSIN_EMBEDDED", None)
    os.environ["TOCSIN_TEST_SERVICES_READY"] = "1"  # inherited by worker subprocesses

    from db.platform.migrations import migrate_all
    from tocsin import boot
    from tocsin.core.settings import load_settings

    boot.start(load_settings())
    migrate_all()
    if "SES_ENDPOINT_URL" in _services.env:  # the local endpoint: sender and ops topic
        from tocsin.monitoring.ops_alerts import prepare_local_aws

        for name, value in prepare_local_aws(load_settings()).items():
            os.environ.setdefault(name, value)
    # The test process is one more process of the product: settings read once, the broker
    # and the after-commit wake-ups installed, as the web and worker processes do.
    boot.start_messaging(boot.start(load_settings()))


@pytest.fixture(autouse=True)
def process_settings() -> Iterator[None]:
    """A test may point this process's settings elsewhere (tocsin.boot.start); the next test
    starts from the session's settings again."""
    from tocsin import boot
    from tocsin.core import runtime

    before = runtime.settings()
    yield
    if runtime.settings() is not before:
        boot.start(before)
        boot.start_messaging(before)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _services is not None:
        from db.platform.pool import close_pool

        close_pool()
        if _pgbouncer is not None:
            _pgbouncer.stop()
        if _worker_database_url is not None:
            _drop_database(*_worker_database_url)
        _services.stop()
    if _rabbitmq_vhost is not None:
        from tests.support.rabbitmq import delete_vhost
        from tocsin.messaging.broker import current_broker

        current_broker().close()
        delete_vhost(*_rabbitmq_vhost)


def _drop_database(server: str, database: str) -> None:
    import psycopg
    from psycopg import sql

    name = urlsplit(database).path.lstrip("/")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist's controller: add up the fuzz tallies its workers send back."""
    from tests.fuzz.budget import TALLY

    tally = getattr(node, "workeroutput", {}).get("fuzz_tally")
    if tally:
        TALLY.requests += int(tally["requests"])
        TALLY.server_errors.extend(tally["server_errors"])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if _hands_tests_to_workers(config):  # else tests/fuzz/conftest.py prints it
        from tests.fuzz.budget import print_tally

        print_tally(terminalreporter)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """For pytest-xdist's --dist loadgroup: the browser tests share one worker (one portal
    server, one Chromium), and a system module's tests share one (one after the other, as
    they were written: two stacks of one module never run at once); the others go wherever
    a worker is free, except that a module with a module-scoped fixture keeps its tests on one
    worker too (spread over four, the wheel module built and installed its wheel four times)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        path = Path(str(item.path)).relative_to(ROOT / "tests")
        if path.parts[0] == "browser":
            item.add_marker(pytest.mark.xdist_group("browser"))
        elif path.parts[0] == "system":
            item.add_marker(pytest.mark.xdist_group(f"system-{path.stem}"))
        elif _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(f"module-{path.stem}"))


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(definition.scope == "module"
               for definitions in info.name2fixturedefs.values() for definition in definitions)

