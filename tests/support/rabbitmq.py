"""A RabbitMQ vhost of its own for a test run or a Procfile stack.

Dramatiq's RabbitMQ broker has no namespace (its queues are named after the actors'), so
two runs sharing one RabbitMQ are kept apart the way RabbitMQ keeps tenants apart: a vhost
each, made with `rabbitmqctl` where this user may run it, else through the management API
(when its plugin listens), and deleted at the end with everything in it.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import shutil
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import pika
import pika.exceptions
from dramatiq.common import dq_name, xq_name

LOCAL_RABBITMQ = "amqp://guest:guest@127.0.0.1:5672/%2F"  # this machine's RabbitMQ
MANAGEMENT_PORT = 15672
CTL_TIMEOUT_SECONDS = 60.0  # rabbitmqctl boots an Erlang VM per call: seconds, not milliseconds
CONNECT_TIMEOUT_SECONDS = 5.0


class VhostUnavailable(RuntimeError):
    """Neither rabbitmqctl nor the management API could make a vhost."""


def unreachable_reason(url: str) -> str | None:
    """None when RabbitMQ accepts a connection at ``url``; else why not."""
    parameters = pika.URLParameters(url)
    parameters.socket_timeout = CONNECT_TIMEOUT_SECONDS
    parameters.connection_attempts = 1
    try:
        pika.BlockingConnection(parameters).close()
    except (pika.exceptions.AMQPError, OSError) as error:
        return f"RabbitMQ does not accept connections at {parameters.host}:{parameters.port}: {error!r}"
    return None


def with_vhost(url: str, vhost: str) -> str:
    """``url`` naming another vhost."""
    return urlunsplit(urlsplit(url)._replace(path="/" + quote(vhost, safe="")))


def create_vhost(url: str, vhost: str) -> str:
    """Make ``vhost`` on the RabbitMQ at ``url``, open to the URL's user; the URL for it."""
    user = unquote(urlsplit(url).username or "guest")
    if _ctl_usable():
        _ctl("add_vhost", vhost)
        _ctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
    else:
        _management(url, "PUT", f"/api/vhosts/{quote(vhost, safe='')}")  # grants its creator access
    return with_vhost(url, vhost)


def delete_vhost(url: str, vhost: str) -> None:
    if _ctl_usable():
        _ctl("delete_vhost", vhost)
    else:
        _management(url, "DELETE", f"/api/vhosts/{quote(vhost, safe='')}")


@contextlib.contextmanager
def own_queues(prefix: str) -> Iterator[dict[str, str]]:
    """The environment that gives processes started by a test queues of their own: a
    Dramatiq namespace of their own and, when the run is on RabbitMQ (BROKER_URL), a vhost
    of their own, deleted with everything in it when the block ends. Without it a worker the
    test starts would consume the run's queues (RabbitMQ has no namespace)."""
    namespace = f"{prefix}-{uuid.uuid4().hex[:8]}"
    broker = os.environ.get("BROKER_URL")
    if not broker:
        yield {"DRAMATIQ_NAMESPACE": namespace}
        return
    url = create_vhost(broker, namespace)
    try:
        yield {"DRAMATIQ_NAMESPACE": namespace, "BROKER_URL": url}
    finally:
        delete_vhost(broker, namespace)


@functools.cache
def _ctl_usable() -> bool:
    if shutil.which("rabbitmqctl") is None:
        return False
    done = subprocess.run(["rabbitmqctl", "-q", "list_vhosts"], capture_output=True,
                          timeout=CTL_TIMEOUT_SECONDS)
    return done.returncode == 0


def _ctl(*args: str) -> None:
    done = subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True,
                          timeout=CTL_TIMEOUT_SECONDS)
    if done.returncode != 0:
        raise VhostUnavailable(f"rabbitmqctl {' '.join(args)} failed: {done.stderr.strip()}")


def _management(url: str, method: str, path: str) -> None:
    parts = urlsplit(url)
    credentials = f"{unquote(parts.username or 'guest')}:{unquote(parts.password or 'guest')}"
    request = urllib.request.Request(
        f"http://{parts.hostname}:{MANAGEMENT_PORT}{path}", method=method,
        headers={"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()})
    try:
        urllib.request.urlopen(request, timeout=CONNECT_TIMEOUT_SECONDS).close()
    except (urllib.error.URLError, OSError) as error:
        raise VhostUnavailable(
            "a vhost per test run needs rabbitmqctl (as a user allowed to run it) or RabbitMQ's "
            f"management plugin on port {MANAGEMENT_PORT}: {error}") from None


def lose_every_message(url: str, queues: Iterable[str], namespace: str) -> None:
    """What a reset RabbitMQ node leaves of the queued messages and of the sweeper's marker:
    nothing. The queues are purged rather than deleted, so that workers running in this
    process keep consuming (a worker started after a real reset declares them again)."""
    from tocsin.messaging.sweeper_marker import MARKER_NAME

    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        for queue in queues:
            for name in (queue, dq_name(queue), xq_name(queue)):
                channel.queue_purge(name)
        channel.queue_delete(f"{namespace}.{MARKER_NAME}")
    finally:
        connection.close()
