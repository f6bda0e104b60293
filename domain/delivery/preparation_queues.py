"""Which Dramatiq queue prepares a product's rule notices.

Each product named in the PRODUCT_QUEUES setting has a queue of its own, so a backlog or a
poison message in one product never stalls another's; every other product shares
`prepare_other` until ops give it a line of its own (Procfile: `--queues prepare_<code>`).
"""

from __future__ import annotations

from collections.abc import Collection

from domain.errors import InvalidInput

__all__ = [
    "DEFAULT_PRODUCT_QUEUES",
    "QUEUE_PREFIX",
    "SHARED_QUEUE",
    "parse_product_queues",
    "preparation_queue",
    "preparation_queues",
]

QUEUE_PREFIX = "prepare_"
SHARED_QUEUE = "prepare_other"
DEFAULT_PRODUCT_QUEUES = ("fraud", "whistle", "metrology")


def preparation_queue(product_code: str, own_queues: Collection[str] = DEFAULT_PRODUCT_QUEUES) -> str:
    """`prepare_<code>` for a product with its own queue, `prepare_other` for the rest."""
    return f"{QUEUE_PREFIX}{product_code}" if product_code in own_queues else SHARED_QUEUE


def parse_product_queues(raw: str) -> tuple[str, ...]:
    """The PRODUCT_QUEUES setting: product codes separated by commas."""
    codes = tuple(dict.fromkeys(c.strip() for c in raw.split(",") if c.strip()))
    for code in codes:
        if not (code[0].isascii() and code[0].islower() and len(code) <= 32
                and all(ch.isascii() and (ch.islower() or ch.isdigit() or ch == "_") for ch in code)):
            raise InvalidInput(f"PRODUCT_QUEUES: {code!r} is not a product code "
                               "(lower-case letters, digits and _, starting with a letter)")
        if f"{QUEUE_PREFIX}{code}" == SHARED_QUEUE:
            raise InvalidInput(f"PRODUCT_QUEUES: {code!r} would share the name of {SHARED_QUEUE}")
    return codes


def preparation_queues(own_queues: Collection[str] = DEFAULT_PRODUCT_QUEUES) -> list[str]:
    """Every preparation queue a worker consumes: one per named product, and the shared one."""
    return [f"{QUEUE_PREFIX}{code}" for code in own_queues] + [SHARED_QUEUE]
