"""Sealing a tenant's written facts into its evidence chain (tenant migration 0050).

Facts are written to ``evidence_pending`` by triggers in the transaction that writes them;
``seal_pending`` links them into ``evidence_chain`` under the lock of the tenant's chain head,
in batches, so the chain is one line per tenant whatever the number of writers. Sealing twice,
or from two processes at once, changes nothing: the second waits for the head, then finds the
facts gone. Why a sealer after commit rather than a head locked by every writer:
docs/benchmarks/evidence.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from db.platform.tenancy import TenantTx, tenant_tx

__all__ = ["SEAL_BATCH", "ChainHead", "chain_head", "seal_pending", "seal_tenant"]

SEAL_BATCH = 5_000  # facts linked per transaction (a larger backlog takes several)


def seal_pending(tx: TenantTx, max_rows: int = SEAL_BATCH) -> int:
    """Link up to ``max_rows`` pending facts into the chain; how many were linked."""
    row = tx.conn.execute("SELECT evidence_seal(%s)", [max_rows]).fetchone()
    return 0 if row is None else int(str(row[0]))


def seal_tenant(slug: str, max_rows: int = SEAL_BATCH) -> int:
    """Seal everything pending for one tenant, a batch per transaction; how many facts."""
    total = 0
    while True:
        with tenant_tx(slug) as tx:
            sealed = seal_pending(tx, max_rows)
        total += sealed
        if sealed < max_rows:
            return total


@dataclass(frozen=True)
class ChainHead:
    seq: int
    hash: str
    updated_at: datetime
    pending: int  # facts written and not sealed yet


def chain_head(tx: TenantTx) -> ChainHead:
    row = tx.conn.execute(
        "SELECT h.seq, h.hash, h.updated_at, (SELECT count(*) FROM evidence_pending) FROM evidence_head h"
    ).fetchone()
    assert row is not None and isinstance(row[2], datetime)
    return ChainHead(int(str(row[0])), str(row[1]), row[2], int(str(row[3])))
