"""Dramatiq actors: thin shells that open a tenant transaction, call db/ and domain/,
talk to providers through small adapters, and enqueue follow-ups after commit.

`dramatiq actors` imports this package, and the worker runs only the actors it imports:
every module that declares an actor is imported here (tests/integration/test_worker_registry.py
starts the worker as the Procfile does and fails if one is missing). Importing the package
configures the broker first.
"""

# isort: off
from tocsin.messaging import broker as broker  # the broker first: the actors are declared on it
# isort: on
from actors import chat as chat
from actors import digest as digest
from actors import email as email
from actors import evidence as evidence
from actors import prepare as prepare
from actors import relay as relay
from actors import scan as scan
from actors import sms as sms
from actors import sweep as sweep
from actors import webhooks as webhooks

__all__ = ["broker", "chat", "digest", "email", "evidence", "prepare", "relay", "scan", "sms", "sweep",
           "webhooks"]
