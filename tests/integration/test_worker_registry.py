"""What is deployed runs every actor: the Procfile's processes, started as `tocsin up` starts
them, register every actor declared under actors/ and consume every queue one of them can
be sent to.

The actors are found by reading actors/ (every function decorated with `dramatiq.actor`),
not from a list kept next to this test: an actor module the worker command does not import
(as actors.sweep once was) fails here. Two observations from outside: a fresh interpreter
imports exactly what the running Dramatiq process was told to import (its command line, read
from /proc) and lists the broker's actors; and a message to each actor, sent through the broker,
is received by the running worker.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace

import dramatiq
import pytest
from dramatiq.common import current_millis

from domain.delivery.preparation_queues import preparation_queues
from tests.integration.conftest import wait_until
from tests.support.procfile_stack import ROOT, ProcfileStack, cmdline
from tocsin.core.settings import load_settings
from tocsin.messaging.broker import build_broker

ACTORS = ROOT / "actors"
DEFAULT_QUEUE = "default"  # dramatiq's queue for an actor that names none
SENT_AGO_MS = 60_000  # milliseconds: how old the test's messages claim to be, far past 1 ms

# What `python -m dramatiq ARGS` imports, interpreted by dramatiq's own argument parser.
LIST_REGISTERED = """
import importlib, json, sys
from dramatiq.cli import import_broker, make_argument_parser
args = make_argument_parser().parse_args(sys.argv[1:])
_, broker = import_broker(args.broker)
for module in args.modules:
    importlib.import_module(module)
print(json.dumps({name: broker.get_actor(name).queue_name for name in broker.get_declared_actors()}))
"""


@dataclass(frozen=True)
class DeclaredActor:
    module: str
    name: str
    queue: str


def _is_actor_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return (isinstance(target, ast.Attribute) and target.attr == "actor"
            and isinstance(target.value, ast.Name) and target.value.id == "dramatiq") or (
        isinstance(target, ast.Name) and target.id == "actor")


def _keyword(node: ast.expr, name: str) -> str | None:
    if isinstance(node, ast.Call):
        for keyword in node.keywords:
            if keyword.arg == name:
                assert isinstance(keyword.value, ast.Constant), f"{name} must be a literal to be checked"
                return str(keyword.value.value)
    return None


def declared_actors() -> list[DeclaredActor]:
    """Every `@dramatiq.actor` function in the source under actors/."""
    found = []
    for path in sorted(ACTORS.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for decorator in node.decorator_list:
                    if _is_actor_decorator(decorator):
                        found.append(DeclaredActor(
                            module, _keyword(decorator, "actor_name") or node.name,
                            _keyword(decorator, "queue_name") or DEFAULT_QUEUE))
    return found


def test_the_source_scan_finds_the_actors_it_is_meant_to_guard() -> None:
    names = {a.name for a in declared_actors()}
    # The scan itself must work: these are known to exist; the registry test uses all found.
    assert {"deliver_email", "tick", "scan_tenant", "sweep", "sweep_tenant"} <= names
    assert len(names) == len(declared_actors())  # dramatiq names must be unique


@pytest.fixture(scope="module")
def procfile_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcfileStack]:
    # An hour between scans: the clock's first ticks are all this stack needs to be real.
    stack = ProcfileStack(tmp_path_factory.mktemp("registry"), SCAN_INTERVAL_SECONDS="3600",
                          WORKER_PROCESSES="1", WORKER_THREADS="1")
    try:
        yield stack.start_all()
    finally:
        stack.close()


def _dramatiq_commands(stack: ProcfileStack) -> list[list[str]]:
    """The command line of each running Dramatiq master, after `-m dramatiq`."""
    wait_until(lambda: any(p.dramatiq_master() for p in stack.started), "a Dramatiq worker to start")
    commands = []
    for master in filter(None, (p.dramatiq_master() for p in stack.started)):
        args = cmdline(master)
        commands.append(args[args.index("dramatiq") + 1:])
    return commands


def test_every_actor_under_actors_is_registered_by_the_procfiles_worker_command(
    procfile_stack: ProcfileStack,
) -> None:
    commands = _dramatiq_commands(procfile_stack)
    assert commands, f"no Procfile line runs a Dramatiq worker: {procfile_stack.commands}"
    registered: dict[str, str] = {}
    for args in commands:
        listed = subprocess.run([sys.executable, "-c", LIST_REGISTERED, *args], cwd=ROOT,
                                env=procfile_stack.env, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        registered |= json.loads(listed.stdout)
    declared = {a.name: a.queue for a in declared_actors()}
    missing = sorted(set(declared) - set(registered))
    assert not missing, (f"declared under actors/ but not registered by the worker command "
                         f"{commands}: {missing}")
    assert {name: registered[name] for name in declared} == declared  # each on its own queue


def test_a_message_to_every_actors_queue_is_received_by_a_running_procfile_worker(
    procfile_stack: ProcfileStack,
) -> None:
    """One message per declared actor, sent to its queue in the stack's broker. It is already past its age
    limit, so the worker that receives it skips it without running the actor (nothing
    happens to any tenant) and says so in its log, naming the message: only a worker that
    consumes the queue and has the actor registered gets that far.

    "Already past" means stamped a minute ago: Dramatiq's AgeLimit compares whole
    milliseconds, and RabbitMQ pushes a message to an idle consumer within the millisecond
    it was made, so a fresh message with a 1 ms limit may still be young enough to run."""
    # The stack's own broker: its Redis namespace, or its RabbitMQ vhost when BROKER_URL is set.
    sender = build_broker(replace(load_settings(), dramatiq_namespace=procfile_stack.namespace,
                                  broker_url=procfile_stack.env.get("BROKER_URL") or None))
    sent = {}
    # Each actor on its own queue, and prepare_notices on every product's preparation queue
    # (actors/prepare.py send_preparation routes it there).
    targets = declared_actors() + [
        DeclaredActor("actors.prepare", "prepare_notices", queue)
        for queue in preparation_queues(load_settings().product_queues)]
    for actor in targets:
        message = dramatiq.Message(queue_name=actor.queue, actor_name=actor.name, args=(),
                                   kwargs={}, options={"max_age": 1},  # milliseconds
                                   message_timestamp=current_millis() - SENT_AGO_MS)
        sent[actor] = sender.enqueue(message).message_id

    def received() -> set[DeclaredActor]:
        logs = "\n".join(p.output() for p in procfile_stack.started)
        return {a for a, message_id in sent.items()
                if re.search(rf"Message '{message_id}' has exceeded its age limit", logs)}

    try:
        wait_until(lambda: received() == set(sent), "every actor's message to be received")
    except AssertionError:
        unconsumed = sorted(f"{a.name} (queue {a.queue})" for a in set(sent) - received())
        raise AssertionError(f"no Procfile process received messages for: {unconsumed}") from None
    finally:
        sender.close()
