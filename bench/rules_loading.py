"""Targeted fact loading in rule evaluation: figures, not a timed test.

    python -m bench.rules_loading [--events 2000] [--subjects 200] [--answer-chars 200] [--seed 1]

Builds one bench tenant (suspended, so no clock scans it) with one product, ``--subjects``
subjects of 60 static fields, 200 form answers (10 forms x 20 questions, free-text answers
of about ``--answer-chars`` characters) and 6 hierarchy levels, and 500 rules saved through
db.rules (100 creation rules, 400 update rules over the product's five trigger types; the
field and form rules name their field or form in trigger metadata; every rule references at
most 3 facts, stored facts drawn uniformly from ``--vocabulary`` of the 266, all by
default). Then it evaluates the same ``--events`` events twice, in alternating rounds:
each evaluation is phases 1-4 for one event against the tenant's rules in its own tenant
transaction (subject row, candidate rules in SQL, phases 2-4), and only the fact loader differs:

  (a) targeted: db.facts.load_facts, only the keys the surviving rules reference, at most
      one query per family per phase;
  (b) everything: db.facts.load_all_facts once per evaluation (the subject's every fact).

Both must fire the same rules for every event; the benchmark prints both rates, the ratio
a/b and whether the goal (a at least 5x b) is met. Without DATABASE_URL it starts embedded
services under .tocsin/bench.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bench.services import bench_services

GOAL = 5.0  # targeted evaluations/s over load-everything evaluations/s
FIELDS = 60
FORMS = 10
QUESTIONS = 20  # per form: 200 answers
LEVELS = ("country", "region", "district", "department", "team", "desk")
UNITS_PER_LEVEL = 4
TRIGGERS = ("field_changed", "status_changed", "assigned", "form_submitted", "message_posted")
STATUSES = ("open", "review", "escalated", "closed")


def _field(n: int) -> str:
    return f"f{n:02d}"


def _form(n: int) -> str:
    return f"form{n}"


ALL_STORED = FIELDS + FORMS * QUESTIONS + len(LEVELS)  # 266 stored facts per subject


def _stored_fact(rng: random.Random, vocabulary: list[int]) -> tuple[str, dict[str, Any]]:
    """A stored fact of the rules' vocabulary and a condition on it that holds for about
    half the subjects."""
    pick = rng.choice(vocabulary)
    if pick < FIELDS:
        name = f"field.{_field(pick)}"
        return name, {"fact": name, "op": "greater", "value": 50}
    pick -= FIELDS
    if pick < FORMS * QUESTIONS:
        name = f"form.{_form(pick // QUESTIONS)}.q{pick % QUESTIONS}"
        return name, {"fact": name, "op": "contains", "value": "yes"}
    level = LEVELS[pick - FORMS * QUESTIONS]
    return f"hierarchy.{level}", {"fact": f"hierarchy.{level}", "op": "in",
                                  "value": [f"{level}{u}" for u in range(UNITS_PER_LEVEL // 2)]}


def _rules(rng: random.Random, vocabulary: list[int]) -> list[dict[str, Any]]:
    actions = {"channels": ["in_app"], "category": "case_alert", "recipients": [{"type": "assignees"}],
               "template": {"title": "Case {{ subject.title }}", "body": "A rule fired."}}
    rules = []
    for n in range(500):
        conditions: list[dict[str, Any]] = []
        trigger: dict[str, Any] = {}
        if n < 100:
            kind = "created"
            trigger["subject_kind"] = "case"
        else:
            kind = "updated"
            t = TRIGGERS[n % len(TRIGGERS)]
            trigger["types"] = [t]
            if t == "field_changed":
                f = _field(rng.randrange(FIELDS))
                trigger["metadata"] = {"field": f}
                conditions.append({"fact": f"field.{f}", "op": "changed"})
            elif t == "form_submitted":
                trigger["metadata"] = {"form": _form(rng.randrange(FORMS))}
            elif t == "status_changed":
                conditions.append({"fact": "subject.status", "op": "changed_to",
                                   "value": rng.choice(STATUSES)})
            elif t == "assigned":
                conditions.append({"fact": "subject.assignees", "op": "not_empty"})
        budget = 3 - len([c for c in conditions if not c["fact"].startswith("subject.")])
        _, condition = _stored_fact(rng, vocabulary)
        conditions.append(condition)
        filters = [_stored_fact(rng, vocabulary)[1] for _ in range(rng.randrange(0, min(2, budget - 1) + 1))]
        rules.append({"name": f"rule {n:03d}", "product": "bench", "kind": kind, "trigger": trigger,
                      "conditions": {"all": conditions}, "filters": {"all": filters},
                      "actions": actions})
    return rules


def _accept(text: str) -> list[str]:
    # The bench's two constant templates; the sandbox's check is not what is measured.
    return []


def _build(slug: str, subjects: int, answer_chars: int, vocabulary: list[int],
           rng: random.Random) -> list[int]:
    from psycopg.types.json import Jsonb

    from db.rules import create_rule, update_rule
    from db.tenancy import tenant_tx

    words = ("yes", "no", "maybe", "pending", "see", "file", "note", "client", "said", "account")
    with tenant_tx(slug) as tx:
        tx.conn.execute("INSERT INTO products (code, name, subject_kinds) VALUES "
                        "('bench', 'Bench', '{case}')")
        tx.conn.execute(
            "INSERT INTO hierarchy_units (level, code, name) "
            "SELECT l, l || u, l || ' ' || u FROM unnest(%s::text[]) l, generate_series(0, %s) u",
            [list(LEVELS), UNITS_PER_LEVEL - 1])
        units = {(str(lv), str(c)): int(str(i)) for i, lv, c in tx.conn.execute(
            "SELECT id, level, code FROM hierarchy_units").fetchall()}
        ids = [int(str(r[0])) for r in tx.conn.execute(
            "INSERT INTO subjects (product, kind, external_id, title, status) "
            "SELECT 'bench', 'case', 'C-' || n, 'Case ' || n, 'open' FROM generate_series(1, %s) n "
            "RETURNING id", [subjects]).fetchall()]
        user = tx.conn.execute("INSERT INTO users (email, role) VALUES ('a@bench.example', 'member') "
                               "RETURNING id").fetchone()
        assert user is not None
        with tx.conn.cursor().copy("COPY subject_fields (subject_id, name, value) FROM STDIN") as copy:
            for s in ids:
                for f in range(FIELDS):
                    copy.write_row((s, _field(f), Jsonb(rng.randrange(100))))
        with tx.conn.cursor().copy(
                "COPY subject_form_answers (subject_id, form, field, value) FROM STDIN") as copy:
            for s in ids:
                for form in range(FORMS):
                    for q in range(QUESTIONS):
                        text = " ".join(rng.choice(words) for _ in range(max(1, answer_chars // 6)))
                        copy.write_row((s, _form(form), f"q{q}", Jsonb(text[:answer_chars])))
        with tx.conn.cursor().copy("COPY subject_hierarchy (subject_id, level, unit_id) FROM STDIN") as copy:
            for s in ids:
                for level in LEVELS:
                    copy.write_row((s, level, units[(level, f"{level}{rng.randrange(UNITS_PER_LEVEL)}")]))
        with tx.conn.cursor().copy("COPY subject_assignees (subject_id, user_id) FROM STDIN") as copy:
            for s in ids[::2]:
                copy.write_row((s, user[0]))
        for table in ("subject_fields", "subject_form_answers", "subject_hierarchy", "rules"):
            tx.conn.execute(f"ANALYZE {table}")
    definitions = _rules(rng, vocabulary)
    with tenant_tx(slug) as tx:
        saved = [create_rule(tx, d, "bench", _accept) for d in definitions]
        # A quarter edited once, as a tenant's rules are: versions 2 in phase 1's answers.
        for rule, d in zip(saved[::4], definitions[::4], strict=True):
            update_rule(tx, rule.id, {**d, "name": d["name"] + " (edited)"}, "bench", _accept)
        tx.conn.execute("ANALYZE rules")
    return ids


@dataclass(frozen=True)
class BenchEvent:
    subject_id: int
    event_type: str
    trigger_type: str | None
    metadata: Mapping[str, object]
    changes: Mapping[str, object]


def _events(count: int, subjects: list[int], rng: random.Random) -> list[BenchEvent]:
    out = []
    for _ in range(count):
        s = rng.choice(subjects)
        if rng.random() < 0.2:
            out.append(BenchEvent(s, "created", None, {}, {}))
            continue
        t = rng.choice(TRIGGERS)
        metadata: dict[str, object] = {}
        changes: dict[str, object] = {}
        if t == "field_changed":
            f = _field(rng.randrange(FIELDS))
            metadata["field"] = f
            changes[f"field.{f}"] = {"from": 1, "to": 2}
        elif t == "form_submitted":
            metadata["form"] = _form(rng.randrange(FORMS))
        elif t == "status_changed":
            changes["subject.status"] = {"from": "open", "to": rng.choice(STATUSES)}
        out.append(BenchEvent(s, "updated", t, metadata, changes))
    return out


Loader = Callable[[Any, int], Callable[[Any], Mapping[str, object]]]


def _targeted(tx: Any, subject_id: int) -> Callable[[Any], Mapping[str, object]]:
    from db.facts import load_facts

    return lambda wanted: load_facts(tx, subject_id, wanted)


def _everything(tx: Any, subject_id: int) -> Callable[[Any], Mapping[str, object]]:
    from db.facts import load_all_facts

    loaded: dict[str, object] = {}

    def load(wanted: Any) -> Mapping[str, object]:
        if not loaded:  # once per evaluation: every fact, whatever is wanted
            loaded.update(load_all_facts(tx, subject_id))
            loaded.setdefault("", None)  # loaded, even for a subject without facts
        return loaded

    return load


def _evaluate(slug: str, events: list[BenchEvent], loader: Loader) -> tuple[float, list[frozenset[int]]]:
    from db.facts import load_subject_facts
    from db.rules import candidate_rules
    from db.tenancy import tenant_tx
    from domain.evaluation import EventFacts, evaluate_event

    fired: list[frozenset[int]] = []
    started = time.perf_counter()
    for e in events:
        with tenant_tx(slug) as tx:
            subject = load_subject_facts(tx, e.subject_id)
            candidates = candidate_rules(tx, "bench", e.event_type, e.trigger_type)
            facts = EventFacts(e.event_type, e.trigger_type, str(subject["subject.kind"]), e.metadata,
                               e.changes, subject)
            outcomes = evaluate_event(candidates, facts, loader(tx, e.subject_id))
        fired.append(frozenset(o.rule_id for o in outcomes if o.fired))
    return time.perf_counter() - started, fired


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rules_loading")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--subjects", type=int, default=200)
    parser.add_argument("--answer-chars", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds per loader")
    parser.add_argument("--vocabulary", type=int, default=ALL_STORED,
                        help=f"how many distinct stored facts the rules draw from (default: all "
                             f"{ALL_STORED}, uniformly)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    with bench_services(print, quiet=True):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from db.migrations import drop_schema
    from db.pool import connection
    from db.tenancy import create_tenant

    rng = random.Random(args.seed)
    slug = f"rulebench-{uuid.uuid4().hex[:8]}"
    tenant = create_tenant(slug, "Rules bench", "Europe/London")
    with connection() as conn, conn.transaction():
        conn.execute("UPDATE control.tenants SET status = 'suspended' WHERE id = %s", [tenant.id])
    try:
        vocabulary = rng.sample(range(ALL_STORED), min(args.vocabulary, ALL_STORED))
        subjects = _build(slug, args.subjects, args.answer_chars, vocabulary, rng)
        events = _events(args.events, subjects, rng)
        _evaluate(slug, events[:200], _targeted)  # warm: caches, plans, parsed rules
        _evaluate(slug, events[:200], _everything)
        seconds = {"targeted": 0.0, "everything": 0.0}
        results: dict[str, list[frozenset[int]]] = {}
        per_round = -(-len(events) // args.rounds)
        for r in range(args.rounds):
            chunk = events[r * per_round:(r + 1) * per_round]
            order = [("targeted", _targeted), ("everything", _everything)]
            for name, loader in order if r % 2 == 0 else order[::-1]:
                spent, fired = _evaluate(slug, chunk, loader)
                seconds[name] += spent
                results.setdefault(name, []).extend(fired)
        if results["targeted"] != results["everything"]:
            print("MISMATCH: the two loaders fired different rules", file=sys.stderr)
            return 1
        a, b = len(events) / seconds["targeted"], len(events) / seconds["everything"]
        fired_total = sum(len(f) for f in results["targeted"])
        print(f"rules: 500 (100 created, 400 updated); subjects: {len(subjects)} x ({FIELDS} fields, "
              f"{FORMS * QUESTIONS} form answers of ~{args.answer_chars} chars, {len(LEVELS)} levels); "
              f"rules draw their stored facts from {len(vocabulary)} of {ALL_STORED}")
        print(f"events evaluated: {len(events):,} per loader; rules fired: {fired_total:,} (same both ways)")
        print(f"(a) targeted loading:    {seconds['targeted']:8.3f} s  {a:10,.0f} evaluations/s")
        print(f"(b) load every fact:     {seconds['everything']:8.3f} s  {b:10,.0f} evaluations/s")
        ratio = a / b
        print(f"a/b = {ratio:.1f}x (goal >= {GOAL:.0f}x: {'met' if ratio >= GOAL else 'NOT met'})")
        return 0 if ratio >= GOAL else 1
    finally:
        with connection() as conn, conn.transaction():
            drop_schema(conn, tenant.schema)
            conn.execute("DELETE FROM control.schema_migrations WHERE schema_name = %s", [tenant.schema])
            conn.execute("DELETE FROM control.tenants WHERE id = %s", [tenant.id])


if __name__ == "__main__":
    sys.exit(main())
