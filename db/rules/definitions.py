"""Event rules of a tenant: saved with a version per change (who, when, what changed),
enabled and disabled, exported and imported as JSON, and phase 1 of evaluation (the
candidate rules for an event, chosen by the SQL)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx
from db.rules.template_preview import dry_render_errors
from domain.errors import Conflict, InvalidInput, NotFound
from domain.rules.conditions import PathError
from domain.rules.definitions import (
    InvalidRule,
    RuleDefinition,
    TemplateCheck,
    check_with_sandbox,
    describe_changes,
    parse_rule,
    rule_errors,
    stored_rule,
)
from domain.rules.evaluation import Candidate, TriggerIndex

__all__ = [
    "MAX_IMPORT",
    "CandidateKey",
    "ImportReport",
    "Rule",
    "RuleVersion",
    "candidate_indexes_of",
    "create_rule",
    "export_rules",
    "get_rule",
    "import_rules",
    "list_rules",
    "rule_versions",
    "set_enabled",
    "update_rule",
]

MAX_IMPORT = 1000  # rules in one import


@dataclass(frozen=True)
class Rule:
    id: int
    product: str
    name: str
    kind: str
    enabled: bool
    version: int
    definition: RuleDefinition
    updated_at: datetime

    def to_json(self) -> dict[str, Any]:
        """The definition as exported: importable as it stands."""
        return {**self.definition.to_json(), "enabled": self.enabled}


@dataclass(frozen=True)
class RuleVersion:
    version: int
    enabled: bool
    changed_by: str
    changed_at: datetime
    summary: str
    definition: dict[str, Any]


@dataclass(frozen=True)
class ImportReport:
    created: list[str]
    updated: list[str]
    unchanged: list[str]


_COLUMNS = "id, product, name, kind, enabled, version, definition, updated_at"


def _rule(row: tuple[Any, ...]) -> Rule:
    return Rule(int(row[0]), row[1], row[2], row[3], bool(row[4]), int(row[5]),
                stored_rule(row[6]), row[7])


def _product_errors(tx: TenantTx, d: RuleDefinition, path: str) -> list[PathError]:
    """What the product's vocabulary refuses: an unknown product, trigger type or kind."""
    at = f"{path}." if path else ""
    row = tx.conn.execute("SELECT subject_kinds, trigger_types FROM products WHERE code = %s",
                          [d.product]).fetchone()
    if row is None:
        return [PathError(f"{at}product", f"unknown product {d.product!r}")]
    kinds, triggers = list(row[0]), list(row[1])  # type: ignore[call-overload]
    errors = [PathError(f"{at}trigger.types[{i}]", f"product {d.product} has no trigger type {t!r} "
                        f"(it has {', '.join(triggers)})")
              for i, t in enumerate(d.trigger.types) if t not in triggers]
    if d.trigger.subject_kind and kinds and d.trigger.subject_kind not in kinds:
        errors.append(PathError(f"{at}trigger.subject_kind", f"product {d.product} has no subject "
                                f"kind {d.trigger.subject_kind!r} (it has {', '.join(kinds)})"))
    return errors


def _checked(tx: TenantTx, data: object, template_check: TemplateCheck) -> RuleDefinition:
    definition = parse_rule(data, template_check)
    errors = _product_errors(tx, definition, "") or dry_render_errors(tx, definition)
    if errors:
        raise InvalidRule(errors)
    return definition


def _record_version(tx: TenantTx, rule_id: int, by: str, summary: str) -> None:
    row = tx.conn.execute(
        "INSERT INTO rule_versions (rule_id, version, definition, enabled, changed_by, summary) "
        "SELECT id, version, definition, enabled, %s, %s FROM rules WHERE id = %s "
        "RETURNING version, enabled",
        [_who(by), summary, rule_id]).fetchone()
    assert row is not None
    verb = summary if summary in ("created", "enabled", "disabled") else "edited"
    record_audit(tx, f"rule.{verb}", "rule", rule_id,
                 after={"version": row[0], "enabled": row[1], "summary": summary})


def _who(by: str) -> str:
    by = by.strip()
    if not by or len(by) > 200:
        raise InvalidInput("who made the change: 1 to 200 characters")
    return by


def create_rule(tx: TenantTx, data: object, by: str,
                template_check: TemplateCheck = check_with_sandbox) -> Rule:
    return _insert(tx, _checked(tx, data, template_check), by)


def _insert(tx: TenantTx, d: RuleDefinition, by: str) -> Rule:
    row = tx.conn.execute(
        f"INSERT INTO rules (product, name, kind, trigger_types, enabled, definition) "
        f"VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (product, name) DO NOTHING "
        f"RETURNING {_COLUMNS}",
        [d.product, d.name, d.kind, list(d.trigger.types),
         True if d.enabled is None else d.enabled, Jsonb(d.to_json())]).fetchone()
    if row is None:
        raise Conflict(f"product {d.product} has a rule named {d.name!r} already")
    _record_version(tx, int(str(row[0])), by, "created")
    return _rule(row)


def _locked(tx: TenantTx, rule_id: int) -> Rule:
    row = tx.conn.execute(f"SELECT {_COLUMNS} FROM rules WHERE id = %s FOR UPDATE",
                          [rule_id]).fetchone()
    if row is None:
        raise NotFound(f"no rule {rule_id}")
    return _rule(row)


def update_rule(tx: TenantTx, rule_id: int, data: object, by: str,
                template_check: TemplateCheck = check_with_sandbox) -> Rule:
    """Save a new definition as the next version; an identical one changes nothing. An
    unstated ``enabled`` keeps the rule's state."""
    current = _locked(tx, rule_id)
    return _new_version(tx, current, _checked(tx, data, template_check), by)


def _new_version(tx: TenantTx, current: Rule, d: RuleDefinition, by: str) -> Rule:
    rule_id = current.id
    enabled = current.enabled if d.enabled is None else d.enabled
    summary = describe_changes(current.definition.to_json(), d.to_json(), current.enabled, enabled)
    if not summary:
        return current
    clash = tx.conn.execute("SELECT 1 FROM rules WHERE product = %s AND name = %s AND id <> %s",
                            [d.product, d.name, rule_id]).fetchone()
    if clash is not None:
        raise Conflict(f"product {d.product} has a rule named {d.name!r} already")
    row = tx.conn.execute(
        f"UPDATE rules SET product = %s, name = %s, kind = %s, trigger_types = %s, enabled = %s, "
        f"definition = %s, version = version + 1, updated_at = now() WHERE id = %s "
        f"RETURNING {_COLUMNS}",
        [d.product, d.name, d.kind, list(d.trigger.types), enabled, Jsonb(d.to_json()), rule_id],
    ).fetchone()
    assert row is not None
    _record_version(tx, rule_id, by, summary)
    return _rule(row)


def set_enabled(tx: TenantTx, rule_id: int, enabled: bool, by: str) -> Rule:
    """Enable or disable a rule, as a new version; already so: nothing changes."""
    current = _locked(tx, rule_id)
    if current.enabled == enabled:
        return current
    row = tx.conn.execute(
        f"UPDATE rules SET enabled = %s, version = version + 1, updated_at = now() WHERE id = %s "
        f"RETURNING {_COLUMNS}", [enabled, rule_id]).fetchone()
    assert row is not None
    _record_version(tx, rule_id, by, "enabled" if enabled else "disabled")
    return _rule(row)


def get_rule(tx: TenantTx, rule_id: int) -> Rule:
    row = tx.conn.execute(f"SELECT {_COLUMNS} FROM rules WHERE id = %s", [rule_id]).fetchone()
    if row is None:
        raise NotFound(f"no rule {rule_id}")
    return _rule(row)


def list_rules(tx: TenantTx, product: str | None = None) -> list[Rule]:
    rows = tx.conn.execute(
        f"SELECT {_COLUMNS} FROM rules "
        f"WHERE (%(product)s::text IS NULL OR product = %(product)s) ORDER BY product, name",
        {"product": product}).fetchall()
    return [_rule(r) for r in rows]


def rule_versions(tx: TenantTx, rule_id: int) -> list[RuleVersion]:
    get_rule(tx, rule_id)
    rows = tx.conn.execute(
        "SELECT version, enabled, changed_by, changed_at, summary, definition FROM rule_versions "
        "WHERE rule_id = %s ORDER BY version", [rule_id]).fetchall()
    return [RuleVersion(int(str(r[0])), bool(r[1]), str(r[2]), r[3], str(r[4]), r[5])  # type: ignore[arg-type]
            for r in rows]


def export_rules(tx: TenantTx, product: str | None = None) -> list[dict[str, Any]]:
    """The rules as JSON definitions (for `tocsin rules import`), the export recorded."""
    exported = [r.to_json() for r in list_rules(tx, product)]
    record_audit(tx, "export.rules", "export", "rules", after={"product": product, "rules": len(exported)})
    return exported


def import_rules(tx: TenantTx, data: object, by: str,
                 template_check: TemplateCheck = check_with_sandbox) -> ImportReport:
    """Create or update each rule by (product, name), all or nothing: when any definition
    is wrong, nothing is saved and every error of every definition is reported."""
    if not isinstance(data, list):
        raise InvalidRule([PathError("$", "an import is a JSON list of rule definitions")])
    if len(data) > MAX_IMPORT:
        raise InvalidRule([PathError("$", f"at most {MAX_IMPORT} rules in one import")])
    errors: list[PathError] = []
    seen: dict[tuple[str, str], int] = {}
    checked: list[RuleDefinition] = []
    for i, item in enumerate(data):
        found = rule_errors(item, template_check, f"[{i}]")
        if not found:
            d = parse_rule(item, template_check)
            found = _product_errors(tx, d, f"[{i}]") or dry_render_errors(tx, d, f"[{i}]")
            key = (d.product, d.name)
            if key in seen:
                found.append(PathError(f"[{i}].name", f"the same rule as [{seen[key]}]"))
            seen[key] = i
            checked.append(d)
        errors.extend(found)
    if errors:
        raise InvalidRule(errors)
    report = ImportReport([], [], [])
    for d in checked:  # each checked once, above
        row = tx.conn.execute("SELECT id, version FROM rules WHERE product = %s AND name = %s",
                              [d.product, d.name]).fetchone()
        label = f"{d.product}/{d.name}"
        if row is None:
            _insert(tx, d, by)
            report.created.append(label)
        else:
            after = _new_version(tx, _locked(tx, int(str(row[0]))), d, by)
            (report.updated if after.version != row[1] else report.unchanged).append(label)
    return report


# --- phase 1 ---------------------------------------------------------------------------

_CACHE_SIZE = 20_000  # parsed definitions kept by (tenant id, rule id, version)
_parsed: OrderedDict[tuple[int, int, int], RuleDefinition] = OrderedDict()
_parsed_lock = threading.Lock()
_NO_CANDIDATES = TriggerIndex([])


CandidateKey = tuple[str, str, str | None]  # (product, event type, trigger type)

# Phase 1 for several (product, event type, trigger type) at once: the wanted keys as
# parallel arrays; a rule answers every key of its product and kind whose trigger type it
# lists (updates) or any (created: no trigger type). Served by rules_candidates. Every key
# gets a row (no rule: NULL arrays), with the rules revision the statement saw.
_CANDIDATES = """
SELECT w.n, array_agg(r.id ORDER BY r.id) FILTER (WHERE r.id IS NOT NULL),
       array_agg(r.version ORDER BY r.id) FILTER (WHERE r.id IS NOT NULL),
       (SELECT revision::text FROM rules_revision)
FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS w (product, kind, trigger, n)
LEFT JOIN rules r ON r.enabled AND r.product = w.product AND r.kind = w.kind
                 AND (w.trigger IS NULL OR w.trigger = ANY(r.trigger_types))
GROUP BY w.n
"""

# Phase 1's answers by (tenant, rules revision, key): a revision names one state of the
# tenant's rules (migration 0014: every statement that changes them gives them a new
# one), so the same revision and key always have the same answer, and the relay, which
# reads the revision with its batch, asks PostgreSQL only for keys it has not seen under it.
_ANSWERS_KEPT = 4_000
_answers: OrderedDict[tuple[int, str, CandidateKey], TriggerIndex] = OrderedDict()

# A key's candidates and their phase-2 index, kept by the exact (rule, version) list that
# phase 1 answered: the same list answers the same candidates, so a batch after the first
# builds nothing (a changed or disabled rule changes the list, hence the entry).
_INDEX_CACHE_SIZE = 4_000
_indexes: OrderedDict[tuple[int, tuple[int, ...], tuple[int, ...]], TriggerIndex] = OrderedDict()


def candidate_indexes_of(tx: TenantTx, keys: list[CandidateKey],
                         revision: str | None = None) -> dict[CandidateKey, TriggerIndex]:
    """Phase 1 for every (product, event type, trigger type) of a batch, in one statement,
    each key's candidates (in rule id order) indexed for phase 2. A (rule, version) is
    immutable, so its parsed definition is kept in process and only new versions'
    definitions are read (a second statement, only then); the index of a list of (rule,
    version) already seen is reused. Given the tenant's rules ``revision`` (read in the
    caller's own statement), the keys already answered under it are not asked again."""
    keys = wanted_keys = list(dict.fromkeys(keys))
    if not keys:
        return {}
    tenant = tx.tenant.id
    out: dict[CandidateKey, TriggerIndex] = {}
    if revision is not None:
        with _parsed_lock:
            for k in keys:
                kept = _answers.get((tenant, revision, k))
                if kept is not None:
                    _answers.move_to_end((tenant, revision, k))
                    out[k] = kept
        keys = [k for k in keys if k not in out]
        if not keys:
            return {k: out[k] for k in wanted_keys}
    rows = tx.conn.execute(_CANDIDATES, [[k[0] for k in keys], [k[1] for k in keys],
                                         [k[2] for k in keys]]).fetchall()
    seen_revision = str(rows[0][3]) if rows else None
    missing: dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]] = {}
    with _parsed_lock:
        for n, ids, versions, _ in rows:
            at = int(str(n)) - 1  # WITH ORDINALITY counts from 1
            if not ids:
                out[keys[at]] = _NO_CANDIDATES
                continue
            signature: tuple[int, tuple[int, ...], tuple[int, ...]] = (
                tenant, tuple(ids), tuple(versions))  # type: ignore[arg-type]
            index = _indexes.get(signature)
            if index is None:
                missing[at] = signature
            else:
                _indexes.move_to_end(signature)
                out[keys[at]] = index
        wanted = {(tenant, i, v) for _, ids, vs in missing.values() for i, v in zip(ids, vs, strict=True)}
        known = {k: _parsed[k] for k in wanted if k in _parsed}
    unknown = sorted(wanted - set(known))
    if unknown:
        # From the immutable versions, not the rules row: a change committed since the
        # first statement must not be cached under the version read there.
        fresh = tx.conn.execute(
            "SELECT v.rule_id, v.version, v.definition FROM rule_versions v "
            "JOIN unnest(%s::bigint[], %s::int[]) AS w (id, version) "
            "  ON v.rule_id = w.id AND v.version = w.version",
            [[k[1] for k in unknown], [k[2] for k in unknown]]).fetchall()
        with _parsed_lock:
            for rule_id, version, definition in fresh:
                key = (tenant, int(str(rule_id)), int(str(version)))
                known[key] = _parsed[key] = stored_rule(definition)  # type: ignore[arg-type]
            while len(_parsed) > _CACHE_SIZE:
                _parsed.popitem(last=False)
    complete = True
    with _parsed_lock:
        for n, signature in missing.items():
            _, ids, vs = signature
            index = TriggerIndex([Candidate(i, v, known[tenant, i, v])
                                  for i, v in zip(ids, vs, strict=True) if (tenant, i, v) in known])
            if len(index.candidates) == len(ids):  # a version deleted meanwhile: not kept
                _indexes[signature] = index
                while len(_indexes) > _INDEX_CACHE_SIZE:
                    _indexes.popitem(last=False)
            else:
                complete = False
            out[keys[n]] = index
        if seen_revision is not None and complete:
            # Kept under the revision this statement saw (the caller's may be older).
            for k in keys:
                _answers[(tenant, seen_revision, k)] = out[k]
            while len(_answers) > _ANSWERS_KEPT:
                _answers.popitem(last=False)
    return {k: out[k] for k in wanted_keys}  # in the order asked
