"""Preference resolution inside prepare: figures, not a timed test.

    python -m bench.prefs [--pairs 100000] [--seed 1] [--keep]

Builds one bench tenant (slug prefbench-<random>, suspended so no clock scans it) with
``--pairs / 8`` users, a user choice for about half of the (user, category) pairs and
tenant defaults (some locked) for five of the eight categories. Then, inside one tenant
transaction, as prepare runs it, it resolves every (user, category) pair:

  (a) set-based: db.people.preferences.resolve_preferences, one statement for all pairs;
  (b) per pair: db.people.preferences.resolve_preference, one query per pair;

checks both give the same answer for every pair, and prints both rates, the ratio a/b and
whether the goal (a at least 20x b) is met. DATABASE_URL must name the database.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid

from db.people.preferences import resolve_preference, resolve_preferences, save_category_default
from db.platform.migrations import drop_schema
from db.platform.pool import connection
from db.platform.tenancy import create_tenant, tenant_tx
from domain.delivery.preferences import CATEGORIES, Frequency, Preference

GOAL = 20.0  # set-based pairs/s over per-pair pairs/s


def _build(slug: str, users: int, rng: random.Random) -> list[int]:
    with tenant_tx(slug) as tx:
        rows = tx.conn.execute(
            "INSERT INTO users (email, role) SELECT 'u' || n || '@bench.example', 'member' "
            "FROM generate_series(1, %s) n RETURNING id", [users]).fetchall()
        ids = [int(str(r[0])) for r in rows]
        choices = [
            (u, c, rng.random() < 0.8, rng.random() < 0.7, rng.choice(list(Frequency)).value)
            for u in ids for c in CATEGORIES if rng.random() < 0.5
        ]
        with tx.conn.cursor().copy(
            "COPY notification_preferences (user_id, category, in_app, email, frequency) FROM STDIN"
        ) as copy:
            for row in choices:
                copy.write_row(row)
        for n, category in enumerate(CATEGORIES[:5]):
            save_category_default(
                tx, category, Preference(True, n % 2 == 0, Frequency.INSTANT), locked=n < 2,
                lock_reason="Required by policy" if n < 2 else None, critical=n == 0, by_user_id=ids[0],
            )
        tx.conn.execute("ANALYZE notification_preferences")
    return ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.prefs")
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    users = max(1, args.pairs // len(CATEGORIES))
    slug = f"prefbench-{uuid.uuid4().hex[:8]}"
    tenant = create_tenant(slug, "Preference bench", "Europe/London")
    with connection() as conn, conn.transaction():
        conn.execute("UPDATE control.tenants SET status = 'suspended' WHERE id = %s", [tenant.id])
    try:
        ids = _build(slug, users, rng)
        pairs = [(u, c) for u in ids for c in CATEGORIES]
        rng.shuffle(pairs)
        with tenant_tx(slug) as tx:
            started = time.perf_counter()
            together = resolve_preferences(tx, pairs)
            set_seconds = time.perf_counter() - started
            started = time.perf_counter()
            one_by_one = {(u, c): resolve_preference(tx, u, c) for u, c in pairs}
            pair_seconds = time.perf_counter() - started
        if together != one_by_one:
            print("MISMATCH: the two paths disagree", file=sys.stderr)
            return 1
        set_rate, pair_rate = len(pairs) / set_seconds, len(pairs) / pair_seconds
        ratio = set_rate / pair_rate
        print(f"pairs resolved: {len(pairs):,} ({users:,} users x {len(CATEGORIES)} categories)")
        print(f"(a) set-based, one statement: {set_seconds:8.3f} s  {set_rate:12,.0f} pairs/s")
        print(f"(b) one query per pair:       {pair_seconds:8.3f} s  {pair_rate:12,.0f} pairs/s")
        print(f"a/b = {ratio:.1f}x (goal >= {GOAL:.0f}x: {'met' if ratio >= GOAL else 'NOT met'})")
        return 0 if ratio >= GOAL else 1
    finally:
        if not args.keep:
            with connection() as conn, conn.transaction():
                drop_schema(conn, tenant.schema)
                conn.execute("DELETE FROM control.schema_migrations WHERE schema_name = %s", [tenant.schema])
                conn.execute("DELETE FROM control.tenants WHERE id = %s", [tenant.id])


if __name__ == "__main__":
    sys.exit(main())
