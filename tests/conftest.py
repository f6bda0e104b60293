"""Test services: real PostgreSQL, Redis and a local SES endpoint.

When DATABASE_URL / REDIS_URL are unset the embedded ones are started (as `make run`
does); set them to run against real servers. The local SES endpoint is always started
unless SES_ENDPOINT_URL names one: the suite never talks to real AWS. Each run uses its
own Dramatiq namespace, so a shared Redis carries no messages between runs. With
BROKER_URL set (`make test-rabbitmq`) the run uses a RabbitMQ vhost of its own, made for it
and deleted after it (tests/support/rabbitmq.py).
"""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_services = None
_rabbitmq_vhost: tuple[str, str] | None = None  # (the given BROKER_URL, this run's vhost)


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("TOCSIN_TEST_SERVICES_READY"):
        _start_services()
    # Fixtures that import the app (and so need the settings): registered only now.
    config.pluginmanager.import_plugin("tests.integration.portal_support")


def _start_services() -> None:
    global _services
    from tocsin.shell.services import start_embedded

    home = Path(os.environ.get("TOCSIN_TEST_HOME", ROOT / ".tocsin" / "test"))
    env = dict(os.environ)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ROLE_ARN"):
        env.pop(name, None)
        os.environ.pop(name, None)
    _services = start_embedded(home, env)
    os.environ.update(_services.env)
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
        _services.stop()
    if _rabbitmq_vhost is not None:
        from tests.support.rabbitmq import delete_vhost
        from tocsin.messaging.broker import current_broker

        current_broker().close()
        delete_vhost(*_rabbitmq_vhost)
