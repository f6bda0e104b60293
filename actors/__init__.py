"""Dramatiq actors: thin shells that open a tenant transaction, call db/ and domain/,
talk to providers through small adapters, and enqueue follow-ups after commit.

`dramatiq actors` imports this package; importing it configures the broker first.
"""

from actors import broker as broker
from actors import digest as digest
from actors import email as email
from actors import scan as scan
