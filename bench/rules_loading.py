"""Targeted fact loading in rule evaluation, through the relay's own code path.

    python -m bench.rules_loading [--events 4000] [--subjects 300] [--rounds 4] [--batch 100]

Builds one bench tenant (suspended, so no relay or clock visits it) with a fraud-case
product, ``--subjects`` subjects (cases and alerts) of 60 static fields, 200 form answers
(20 forms x 10 questions: 5 choice answers and 5 free-text answers of ~``--answer-chars``
characters) and 6 hierarchy levels, and 500 rules saved through db.rules.definitions, spread as a
tenant's are over the product's vocabulary:

  created         40  (subject kind, and the channel the case came in by in metadata)
  field_changed  240  (each names the field in its trigger metadata: 4 per field)
  status_changed  24  (a "changed to <status>" condition; half only for cases)
  assigned        40  (the assignment role (8) in trigger metadata; half only for cases)
  form_submitted 116  (each names its form (20) in trigger metadata: ~6 per form)
  message_posted  40  (the message channel (8) in metadata; inbound/outbound a condition)

Every rule references at most 3 stored facts (conditions and filters together). The events
are a mix of created (20%) and updated ones over the five trigger types, with the metadata
and changes the intake writes. Phase 1 (SQL: product, kind, trigger type) and phase 2
(metadata, in memory) leave a handful of rules per event, as in production.

Each round evaluates every event once per loader, in alternating order: the events are set
back to pending (and their ledger claims deleted) before each run, then claimed in batches
of ``--batch`` with db.events.relay.claim_events and evaluated with db.rules.evaluations.evaluate_claimed
in their own tenant transactions, exactly as actors/relay.py does. The only difference
between the runs is the fact loader handed to evaluate_claimed (made afresh per batch):

  (a) targeted: db.events.facts.load_facts_of_subjects, production's default: the keys the
      batch's surviving rules reference, one query per family for the whole batch, the
      families' queries pipelined (one round trip per phase);
  (b) everything: db.events.facts.load_all_facts wrapped to the same signature: every fact of each
      subject (three queries), once per batch the first time any of its facts is wanted;
  (c) for reference, every fact of the batch's subjects in three pipelined queries
      (db.events.facts.load_all_facts_of_subjects): what is left once round trips are taken out.

Every run must claim the same (rule, event) pairs and store the same traces. It prints
evaluations/s of each (the evaluation transactions; the claims are timed apart and shown
included), the ratio a/b over all rounds and per round (a round's two runs are close in
time, so its ratio is less exposed to load from elsewhere), the rules left after each phase
and the facts, queries and round trips per evaluation in each mode. Without
DATABASE_URL it starts embedded services under .tocsin/bench.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.services import bench_services

GOAL = 5.0  # targeted evaluations/s over load-everything evaluations/s
PRODUCT = "fraud"
KINDS = ("case", "alert")
FIELDS = 60
FORMS = ("intake", "kyc", "aml_review", "chargeback", "interview", "evidence", "closure",
         "escalation", "appeal", "audit", "sanctions", "pep_check", "device", "merchant",
         "refund", "dispute", "police_report", "customer_call", "risk_score", "sign_off")
QUESTIONS = 10  # per form: 200 answers; q0-q4 choice answers, q5-q9 free text
CHOICES = ("yes", "no", "unsure")
LEVELS = ("country", "region", "district", "department", "team", "desk")
UNITS_PER_LEVEL = 4
STATUSES = ("open", "triage", "review", "escalated", "on_hold", "closed")
CHANNELS = ("web", "branch", "phone", "api", "partner")
ROLES = ("investigator", "reviewer", "approver", "analyst", "supervisor", "legal", "compliance",
         "auditor")
MESSAGE_CHANNELS = ("portal", "email", "phone", "chat", "sms", "letter", "partner_api", "branch")
TRIGGER_MIX = (("created", None, 20), ("updated", "field_changed", 30),
               ("updated", "status_changed", 15), ("updated", "assigned", 10),
               ("updated", "form_submitted", 15), ("updated", "message_posted", 10))
ALL_STORED = FIELDS + len(FORMS) * QUESTIONS + len(LEVELS)  # 266 stored facts per subject


def _field(n: int) -> str:
    return f"f{n:02d}"


# --- the rules -------------------------------------------------------------------------


def _stored_condition(rng: random.Random, form: str | None = None) -> dict[str, Any]:
    """A condition on one stored fact that holds for part of the subjects."""
    family = "form" if form else rng.choice(("field", "field", "form", "hierarchy"))
    if family == "field":
        return {"fact": f"field.{_field(rng.randrange(FIELDS))}", "op": "greater",
                "value": rng.randrange(50, 95)}
    if family == "form":
        name = form or rng.choice(FORMS)
        q = rng.randrange(QUESTIONS)
        if q < QUESTIONS // 2:
            return {"fact": f"form.{name}.q{q}", "op": "equals", "value": rng.choice(CHOICES)}
        return {"fact": f"form.{name}.q{q}", "op": "contains", "value": rng.choice(("client", "urgent"))}
    level = rng.choice(LEVELS)
    return {"fact": f"hierarchy.{level}", "op": "in",
            "value": [f"{level}{u}" for u in rng.sample(range(UNITS_PER_LEVEL), rng.randrange(1, 3))]}


def _stored(n: int, rng: random.Random, form: str | None = None) -> list[dict[str, Any]]:
    return [_stored_condition(rng, form) for _ in range(n)]


def _rules(rng: random.Random) -> list[dict[str, Any]]:
    actions = {"channels": ["in_app"], "category": "case_alert", "recipients": [{"type": "assignees"}],
               "template": {"title": "Case {{ subject.title }}", "body": "A rule fired."}}
    rules: list[dict[str, Any]] = []

    def add(kind: str, trigger: dict[str, Any], conditions: list[dict[str, Any]],
            filters: list[dict[str, Any]]) -> None:
        rules.append({"name": f"rule {len(rules):03d}", "product": PRODUCT, "kind": kind,
                      "trigger": trigger, "conditions": {"all": conditions},
                      "filters": {"all": filters}, "actions": actions})

    for n in range(40):
        trigger: dict[str, Any] = {"subject_kind": "case" if n % 4 else "alert",
                                   "metadata": {"channel": CHANNELS[n % len(CHANNELS)]}}
        add("created", trigger, _stored(1, rng), _stored(rng.randrange(3), rng))
    for n in range(240):
        f = _field(n % FIELDS)
        conditions: list[dict[str, Any]] = [{"fact": f"field.{f}", "op": "changed"}]
        if n % 2:  # the new value itself, from the register
            conditions.append({"fact": f"field.{f}", "op": "greater", "value": rng.randrange(50, 95)})
        add("updated", {"types": ["field_changed"], "metadata": {"field": f}}, conditions,
            _stored(rng.randrange(3 - len(conditions) + 1), rng))
    for n in range(24):
        trigger = {"types": ["status_changed"]}
        if n % 2:
            trigger["subject_kind"] = "case"
        add("updated", trigger,
            [{"fact": "subject.status", "op": "changed_to", "value": STATUSES[n % len(STATUSES)]}],
            _stored(1 + rng.randrange(2), rng))
    for n in range(40):
        trigger = {"types": ["assigned"], "metadata": {"role": ROLES[n % len(ROLES)]}}
        if n % 2:
            trigger["subject_kind"] = "case"
        add("updated", trigger, [{"fact": "subject.assignees", "op": "changed"}],
            _stored(rng.randrange(3), rng))
    for n in range(116):
        form = FORMS[n % len(FORMS)]
        add("updated", {"types": ["form_submitted"], "metadata": {"form": form}},
            _stored(1 + rng.randrange(2), rng, form), _stored(rng.randrange(2), rng))
    for n in range(40):
        add("updated", {"types": ["message_posted"],
                        "metadata": {"channel": MESSAGE_CHANNELS[n % len(MESSAGE_CHANNELS)]}},
            [{"fact": "event.direction", "op": "equals", "value": ("inbound", "outbound")[n % 2]}],
            _stored(rng.randrange(3), rng))
    assert len(rules) == 500
    return rules


# --- the tenant ------------------------------------------------------------------------


def _accept(text: str) -> list[str]:
    # The bench's two constant templates; the sandbox's check is not what is measured.
    return []


def _build(slug: str, subjects: int, answer_chars: int, rng: random.Random) -> list[int]:
    from psycopg.types.json import Jsonb

    from db.platform.tenancy import tenant_tx
    from db.rules.definitions import create_rule, update_rule

    words = ("client", "said", "account", "transfer", "urgent", "note", "file", "called", "the", "bank")
    with tenant_tx(slug) as tx:
        tx.conn.execute("INSERT INTO products (code, name, subject_kinds) VALUES (%s, 'Fraud cases', %s)",
                        [PRODUCT, list(KINDS)])
        tx.conn.execute(
            "INSERT INTO hierarchy_units (level, code, name) "
            "SELECT l, l || u, l || ' ' || u FROM unnest(%s::text[]) l, generate_series(0, %s) u",
            [list(LEVELS), UNITS_PER_LEVEL - 1])
        units = {(str(lv), str(c)): int(str(i)) for i, lv, c in tx.conn.execute(
            "SELECT id, level, code FROM hierarchy_units").fetchall()}
        ids = [int(str(r[0])) for r in tx.conn.execute(
            "INSERT INTO subjects (product, kind, external_id, title, status) "
            "SELECT %s, CASE WHEN n %% 5 = 0 THEN 'alert' ELSE 'case' END, 'C-' || n, 'Case ' || n, "
            "'open' FROM generate_series(1, %s) n RETURNING id", [PRODUCT, subjects]).fetchall()]
        users = [int(str(r[0])) for r in tx.conn.execute(
            "INSERT INTO users (email, role) SELECT 'u' || n || '@bench.example', 'member' "
            "FROM generate_series(1, 8) n RETURNING id").fetchall()]
        with tx.conn.cursor().copy("COPY subject_fields (subject_id, name, value) FROM STDIN") as copy:
            for s in ids:
                for f in range(FIELDS):
                    copy.write_row((s, _field(f), Jsonb(rng.randrange(100))))
        with tx.conn.cursor().copy(
                "COPY subject_form_answers (subject_id, form, field, value) FROM STDIN") as copy:
            for s in ids:
                for form in FORMS:
                    for q in range(QUESTIONS):
                        if q < QUESTIONS // 2:
                            value = rng.choice(CHOICES)
                        else:
                            text = " ".join(rng.choice(words) for _ in range(answer_chars // 5 + 1))
                            value = text[:answer_chars]
                        copy.write_row((s, form, f"q{q}", Jsonb(value)))
        with tx.conn.cursor().copy("COPY subject_hierarchy (subject_id, level, unit_id) FROM STDIN") as copy:
            for s in ids:
                for level in LEVELS:
                    copy.write_row((s, level, units[(level, f"{level}{rng.randrange(UNITS_PER_LEVEL)}")]))
        with tx.conn.cursor().copy("COPY subject_assignees (subject_id, user_id) FROM STDIN") as copy:
            for s in ids:
                for u in rng.sample(users, rng.randrange(3)):
                    copy.write_row((s, u))
    definitions = _rules(rng)
    with tenant_tx(slug) as tx:
        saved = [create_rule(tx, d, "bench", _accept) for d in definitions]
        # A quarter edited once, as a tenant's rules are: versions 2 in phase 1's answers.
        for rule, d in zip(saved[::4], definitions[::4], strict=True):
            update_rule(tx, rule.id, {**d, "name": d["name"] + " (edited)"}, "bench", _accept)
    return ids


def _events(slug: str, count: int, subjects: list[int], rng: random.Random) -> list[int]:
    """``count`` events in the outbox, as the intake writes them (metadata and changes)."""
    from db.platform.tenancy import tenant_tx

    kinds = [(kind, trigger) for kind, trigger, weight in TRIGGER_MIX for _ in range(weight)]
    rows: list[tuple[int, str, str | None, str, str]] = []
    for _ in range(count):
        subject = rng.choice(subjects)
        kind, trigger = rng.choice(kinds)
        metadata: dict[str, object] = {}
        changes: dict[str, object] = {}
        if kind == "created":
            metadata["channel"] = rng.choice(CHANNELS)
        elif trigger == "field_changed":
            f = _field(rng.randrange(FIELDS))
            metadata["field"] = f
            changes[f"field.{f}"] = {"from": rng.randrange(100), "to": rng.randrange(100)}
        elif trigger == "status_changed":
            changes["subject.status"] = {"from": "open", "to": rng.choice(STATUSES)}
        elif trigger == "assigned":
            metadata["role"] = rng.choice(ROLES)
            changes["subject.assignees"] = {"from": [], "to": ["u1@bench.example"]}
        elif trigger == "form_submitted":
            metadata["form"] = rng.choice(FORMS)
        else:
            metadata["channel"] = rng.choice(MESSAGE_CHANNELS)
            metadata["direction"] = rng.choice(("inbound", "outbound"))
        rows.append((subject, kind, trigger, json.dumps(changes), json.dumps(metadata)))
    with tenant_tx(slug) as tx:
        ids = tx.conn.execute(
            "INSERT INTO events (product, subject_id, event_type, trigger_type, changes, metadata, "
            "                    occurred_at, source) "
            "SELECT %s, w.s, w.k, w.t, w.c::jsonb, w.m::jsonb, now(), 'cli' "
            "FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[], %s::text[]) "
            "     WITH ORDINALITY AS w (s, k, t, c, m, n) ORDER BY w.n RETURNING id",
            [PRODUCT, *(list(col) for col in zip(*rows, strict=True))]).fetchall()
    return sorted(int(str(r[0])) for r in ids)


# --- the loaders -----------------------------------------------------------------------


@dataclass
class LoadCount:
    calls: int = 0  # loader calls (at most two per batch: phase 3, phase 4)
    facts: int = 0  # fact values loaded (decoded from the rows)
    queries: int = 0  # statements sent for facts
    round_trips: int = 0


# Each is made afresh for every batch (evaluate_claimed's ``load``): a load-everything
# loader loads a subject once per batch, whatever the phases want.
LoaderMaker = Callable[[LoadCount], Callable[[Any, Mapping[int, Any]], Mapping[int, Mapping[str, object]]]]


def _targeted(count: LoadCount) -> Any:
    from db.events.facts import load_facts_of_subjects

    def load(tx: Any, wanted: Mapping[int, Any]) -> Mapping[int, Mapping[str, object]]:
        facts = load_facts_of_subjects(tx, wanted)
        count.calls += 1
        count.round_trips += 1  # the families' queries are pipelined
        count.queries += sum(1 for family in ("fields", "forms", "levels")
                             if any(getattr(w, family) for w in wanted.values()))
        count.facts += sum(len(f) for f in facts.values())
        return facts

    return load


def _everything(count: LoadCount) -> Any:
    """db.events.facts.load_all_facts, per subject, wrapped to the batch signature."""
    from db.events.facts import load_all_facts

    cache: dict[int, dict[str, object]] = {}

    def load(tx: Any, wanted: Mapping[int, Any]) -> Mapping[int, Mapping[str, object]]:
        count.calls += 1
        for subject in wanted:
            if subject not in cache:
                cache[subject] = load_all_facts(tx, subject)
                count.queries += 3
                count.round_trips += 3
                count.facts += len(cache[subject])
        return {s: cache[s] for s in wanted}

    return load


def _everything_batched(count: LoadCount) -> Any:
    """Every fact of the batch's subjects, three queries for the batch (not the goal's
    comparison: it shows what is left once round trips are taken out)."""
    from db.events.facts import load_all_facts_of_subjects

    cache: dict[int, dict[str, object]] = {}

    def load(tx: Any, wanted: Mapping[int, Any]) -> Mapping[int, Mapping[str, object]]:
        count.calls += 1
        new = [s for s in wanted if s not in cache]
        if new:
            cache.update(load_all_facts_of_subjects(tx, new))
            count.queries += 3
            count.round_trips += 1
            count.facts += sum(len(cache[s]) for s in new)
        return {s: cache[s] for s in wanted}

    return load


# --- a run -----------------------------------------------------------------------------


@dataclass
class Run:
    evaluate_seconds: float = 0.0
    claim_seconds: float = 0.0
    evaluated: int = 0
    loads: LoadCount = field(default_factory=LoadCount)
    rounds: list[float] = field(default_factory=list)  # evaluate_seconds of each round


def _reset(slug: str) -> None:
    from db.platform.pool import connection
    from db.platform.tenancy import tenant_tx

    with tenant_tx(slug) as tx:
        tx.conn.execute("DELETE FROM notification_ledger WHERE event_id IS NOT NULL")
        tx.conn.execute("UPDATE events SET status = 'pending', claim_token = NULL, lease_until = NULL, "
                        "attempts = 0, evaluated_at = NULL, last_error = NULL, trace = NULL")
        schema = tx.tenant.schema
    with connection() as conn:
        conn.autocommit = True
        conn.execute(f'VACUUM ANALYZE "{schema}".events, "{schema}".notification_ledger')
        conn.autocommit = False


def _run(slug: str, make: LoaderMaker, batch: int, run: Run) -> None:
    from db.events.relay import claim_events
    from db.platform.tenancy import tenant_tx
    from db.rules.evaluations import evaluate_claimed

    while True:
        started = time.perf_counter()
        with tenant_tx(slug, generic_plans=True, redoable=True) as tx:  # as the relay's own transactions
            claimed = claim_events(tx, limit=batch, lease_seconds=600, max_attempts=5)
        run.claim_seconds += time.perf_counter() - started
        if not claimed.event_ids:
            assert not claimed.in_flight
            return
        started = time.perf_counter()
        with tenant_tx(slug, generic_plans=True, redoable=True) as tx:
            report = evaluate_claimed(tx, claimed.event_ids, make(run.loads))
        run.evaluate_seconds += time.perf_counter() - started
        run.evaluated += report.evaluated
        if report.evaluated != len(claimed.event_ids):
            raise SystemExit(f"evaluated {report.evaluated} of {len(claimed.event_ids)} claimed events")


def _outcome(slug: str) -> tuple[list[tuple[int, int]], dict[int, Any]]:
    from db.platform.tenancy import tenant_tx
    from db.rules.evaluations import stored_traces

    with tenant_tx(slug) as tx:
        claims = [(int(str(a)), int(str(b))) for a, b in tx.conn.execute(
            "SELECT event_id, rule_id FROM notification_ledger WHERE event_id IS NOT NULL "
            "ORDER BY 1, 2").fetchall()]
        evaluated = [int(str(i)) for (i,) in tx.conn.execute(
            "SELECT id FROM events WHERE status = 'evaluated'").fetchall()]
        traces = stored_traces(tx, evaluated)  # the phase-2 parts spliced back in
    return claims, traces


def _phases(traces: Mapping[int, Any]) -> dict[str, float]:
    """Rules per event left after each phase, from the stored traces."""
    totals = {"phase 1 (SQL)": 0, "phase 2 (metadata)": 0, "phase 3 (conditions)": 0, "fired": 0}
    for trace in traces.values():
        for outcome in trace:
            phase = int(outcome["phase"])
            if "rules" in outcome:  # the compact entry of the rules phase 2 dropped
                totals["phase 1 (SQL)"] += len(outcome["rules"])
                continue
            totals["phase 1 (SQL)"] += 1
            totals["phase 2 (metadata)"] += phase >= 3
            totals["phase 3 (conditions)"] += phase >= 4
            totals["fired"] += bool(outcome["fired"])
    return {k: v / max(1, len(traces)) for k, v in totals.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rules_loading")
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--subjects", type=int, default=300)
    parser.add_argument("--answer-chars", type=int, default=200,
                        help="length of the free-text form answers (half of the 200)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds, each loader once a round")
    parser.add_argument("--batch", type=int, default=100, help="events per claim (RELAY_BATCH)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    with bench_services(print, quiet=True):
        return _bench(args)


def _bench(args: argparse.Namespace) -> int:
    from db.platform.migrations import drop_schema
    from db.platform.pool import connection
    from db.platform.tenancy import create_tenant
    from tocsin import boot

    # The worker's process settings (tocsin/boot/worker.py boot): the evaluation below is its code.
    boot.tune_collector()
    rng = random.Random(args.seed)
    slug = f"rulebench-{uuid.uuid4().hex[:8]}"
    tenant = create_tenant(slug, "Rules bench", "Europe/London")
    with connection() as conn, conn.transaction():
        conn.execute("UPDATE control.tenants SET status = 'suspended' WHERE id = %s", [tenant.id])
    try:
        subjects = _build(slug, args.subjects, args.answer_chars, rng)
        _events(slug, args.events, subjects, rng)
        with connection() as conn:
            conn.autocommit = True
            conn.execute(f'ANALYZE "{tenant.schema}".subject_fields, "{tenant.schema}".subject_form_answers, '
                         f'"{tenant.schema}".subject_hierarchy, "{tenant.schema}".rules, '
                         f'"{tenant.schema}".rule_versions')
            conn.autocommit = False
        loaders: dict[str, LoaderMaker] = {"targeted": _targeted, "everything": _everything,
                                           "everything, batched": _everything_batched}
        runs = {name: Run() for name in loaders}
        seen: dict[str, tuple[list[tuple[int, int]], dict[int, Any]]] = {}
        for make in loaders.values():  # warm: parsed rules, plans, caches
            _reset(slug)
            _run(slug, make, args.batch, Run())
        for r in range(args.rounds):
            order = list(loaders) if r % 2 == 0 else list(loaders)[::-1]  # alternate
            for name in order:
                _reset(slug)
                before = runs[name].evaluate_seconds
                _run(slug, loaders[name], args.batch, runs[name])
                runs[name].rounds.append(runs[name].evaluate_seconds - before)
                outcome = _outcome(slug)
                if seen.setdefault(name, outcome) != outcome:
                    print(f"MISMATCH: the {name} loader's runs differ", file=sys.stderr)
                    return 1
        if any(seen[name] != seen["targeted"] for name in loaders):
            print("MISMATCH: the two loaders claimed different rules or traced differently", file=sys.stderr)
            return 1
        return _report(args, len(subjects), runs, seen["targeted"])
    finally:
        with connection() as conn, conn.transaction():
            drop_schema(conn, tenant.schema)
            conn.execute("DELETE FROM control.schema_migrations WHERE schema_name = %s", [tenant.schema])
            conn.execute("DELETE FROM control.tenants WHERE id = %s", [tenant.id])


def _report(args: argparse.Namespace, subjects: int, runs: dict[str, Run],
            outcome: tuple[list[tuple[int, int]], dict[int, Any]]) -> int:
    claims, traces = outcome
    print(f"rules: 500 (40 created, 460 updated over 5 trigger types); subjects: {subjects} x "
          f"({FIELDS} fields, {len(FORMS) * QUESTIONS} form answers, {len(LEVELS)} levels: "
          f"{ALL_STORED} stored facts); events: {args.events:,} (20% created), "
          f"claimed {args.batch} at a time, {args.rounds} alternating rounds per loader")
    print("rules per event left after each phase: " + ", ".join(
        f"{k} {v:.1f}" for k, v in _phases(traces).items())
          + f"; claims per run: {len(claims):,} (same with both loaders)")
    rate = {}
    labels = {"targeted": "(a) targeted loading", "everything": "(b) load every fact",
              "everything, batched": "(c) every fact, batched"}
    for name, label in labels.items():
        run = runs[name]
        n = run.evaluated
        rate[name] = n / run.evaluate_seconds
        with_claims = n / (run.evaluate_seconds + run.claim_seconds)
        print(f"{label:25s} {rate[name]:7,.0f} evaluations/s (claims included {with_claims:5,.0f}/s); "
              f"per evaluation {run.loads.facts / n:5.1f} facts loaded in {run.loads.queries / n:.2f} "
              f"queries, {run.loads.round_trips / n:.2f} round trips")
    ratio = rate["targeted"] / rate["everything"]
    # Each round measures both loaders minutes apart at most: the ratio of a round is less
    # exposed to a burst of load from elsewhere on the machine than the sums are.
    per_round = [b / a for a, b in zip(runs["targeted"].rounds, runs["everything"].rounds, strict=True)]
    print(f"a/b = {ratio:.1f}x over all rounds; per round "
          + ", ".join(f"{r:.1f}x" for r in per_round)
          + f" (median {statistics.median(per_round):.1f}x); goal >= {GOAL:.0f}x: "
          + ("met" if ratio >= GOAL else "NOT met"))
    print(f"a/c = {rate['targeted'] / rate['everything, batched']:.1f}x (what is left of the gain once "
          f"the load-everything side is batched too)")
    return 0 if ratio >= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
