"""What the rules list shows of each rule's history: when it last fired and how many claims
it made in the ledger (notification_ledger.rule_id), in the last 30 days and in all."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from db.platform.tenancy import TenantTx

__all__ = ["NEVER", "RECENT_DAYS", "RuleStats", "rule_stats"]

RECENT_DAYS = 30  # days counted as "recent" in the rules list


@dataclass(frozen=True)
class RuleStats:
    last_fired: datetime | None
    recent: int  # claims in the last RECENT_DAYS days
    total: int


NEVER = RuleStats(None, 0, 0)

# Served by ledger_by_rule (rule_id, claimed_at DESC): one index range per rule.
_STATS = """
SELECT l.rule_id, max(l.claimed_at),
       count(*) FILTER (WHERE l.claimed_at >= now() - make_interval(days => %(days)s)),
       count(*)
FROM notification_ledger l
WHERE l.rule_id = ANY(%(ids)s)
GROUP BY l.rule_id
"""


def rule_stats(tx: TenantTx, rule_ids: list[int]) -> dict[int, RuleStats]:
    """By rule id, its claims; a rule that never fired is absent (use NEVER)."""
    if not rule_ids:
        return {}
    rows = tx.conn.execute(_STATS, {"ids": rule_ids, "days": RECENT_DAYS}).fetchall()
    return {int(str(r[0])): RuleStats(r[1], int(str(r[2])), int(str(r[3])))  # type: ignore[arg-type]
            for r in rows}
