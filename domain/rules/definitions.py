"""Rule definitions (creation, update and time-trigger rules): parsed and validated as a
whole on save, every error reported at once with its JSON path, and the summary of what an
edit changed for the rule's version history.

A time rule ("kind": "time") is evaluated by the clock's scan, not by an event: its trigger
names a due date (a date fact and offsets around it) or a turnaround (hours or days after a
system timestamp), and its conditions say "while this still holds". With no event at hand,
it may not read event.* facts nor the changed/changed_to/changed_from operators."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from domain.errors import InvalidInput
from domain.events.json_input import NUMBER_WORDS
from domain.people.identity import EMAIL_MAX_LENGTH, EMAIL_PATTERN
from domain.rules.conditions import (
    CHANGE_OPS,
    CompiledTree,
    PathError,
    WantedFacts,
    facts_to_load,
    is_scalar,
    parse_fact,
    unholdable_number,
    validate,
)
from domain.rules.obligation_dates import (
    MAX_OFFSET,
    MAX_OFFSETS,
    MAX_TURNAROUND_DAYS,
    MAX_TURNAROUND_HOURS,
    TURNAROUND_AFTER,
    DueDate,
    Turnaround,
)

__all__ = [
    "CATEGORIES",
    "CHANNELS",
    "CODE",
    "EMPTY_TREE",
    "KINDS",
    "MAX_NAME",
    "MAX_RECIPIENTS",
    "MAX_TEMPLATE",
    "NUL_REFUSED",
    "RECIPIENT_TYPES",
    "ROLE",
    "TIME_CATEGORIES",
    "TIME_CATEGORY",
    "InvalidRule",
    "RuleDefinition",
    "TemplateCheck",
    "Trigger",
    "check_with_sandbox",
    "describe_changes",
    "parse_rule",
    "rule_errors",
    "stored_rule",
]

KINDS = ("created", "updated", "time")
CHANNELS = ("email", "in_app",
            "slack", "teams",  # sent only where the tenant enabled them (db/delivery/chat_channels.py)
            "sms",  # texted to recipients with a number who have not STOPped (db/delivery/sms_deliveries.py)
            )
CATEGORIES = ("case_alert", "case_update")  # of event rules
TIME_CATEGORIES = ("obligation_due", "case_alert", "case_update")
TIME_CATEGORY = "obligation_due"  # a time rule's category when it names none
RECIPIENT_TYPES = ("assignees", "role", "head", "user", "address")
CODE = re.compile(r"[a-z][a-z0-9_]{0,31}")
ROLE = re.compile(r"[a-z][a-z0-9_]{0,63}")
MAX_NAME = 200  # characters
MAX_RECIPIENTS = 20
MAX_TEMPLATE = 20_000  # characters of one template
_TOP_KEYS = ("name", "product", "kind", "trigger", "conditions", "filters", "actions", "enabled")
EMPTY_TREE: dict[str, Any] = {"all": []}

TemplateCheck = Callable[[str], list[str]]


def check_with_sandbox(text: str) -> list[str]:
    """The template sandbox's own check (domain.rules.templates, written beside the preparation)."""
    from domain.rules import templates

    problems: list[str] = templates.check(text)
    return problems


class InvalidRule(InvalidInput):
    """A rule definition (or an import of several) with every error found, each at its path."""

    def __init__(self, errors: list[PathError]) -> None:
        self.errors = errors
        super().__init__(f"invalid rule ({len(errors)} error{'s' if len(errors) != 1 else ''}): "
                         + "; ".join(str(e) for e in errors))


@dataclass(frozen=True)
class Trigger:
    types: tuple[str, ...]
    subject_kind: str | None
    metadata: Mapping[str, object]
    due: DueDate | None = None  # time rules: exactly one of due and turnaround
    turnaround: Turnaround | None = None


@dataclass(frozen=True)
class RuleDefinition:
    name: str
    product: str
    kind: str
    trigger: Trigger
    conditions: Mapping[str, Any]  # phase 3
    filters: Mapping[str, Any]  # phase 4
    actions: Mapping[str, Any]
    enabled: bool | None  # None: not stated (a new rule is enabled; an update keeps its state)

    def to_json(self) -> dict[str, Any]:
        """The canonical definition as stored (without enabled, which the rule row holds)."""
        trigger: dict[str, Any] = {}
        if self.trigger.types:
            trigger["types"] = list(self.trigger.types)
        if self.trigger.subject_kind:
            trigger["subject_kind"] = self.trigger.subject_kind
        if self.trigger.metadata:
            trigger["metadata"] = dict(self.trigger.metadata)
        if self.trigger.due:
            due = self.trigger.due
            trigger["due"] = {"fact": due.fact, "offsets": list(due.offsets),
                              "business_days": due.business_days}
        if self.trigger.turnaround:
            tat = self.trigger.turnaround
            trigger["turnaround"] = {"after": tat.after, **(
                {"hours": tat.hours} if tat.hours is not None else
                {"days": tat.days, "business_days": tat.business_days})}
        return {"name": self.name, "product": self.product, "kind": self.kind, "trigger": trigger,
                "conditions": self.conditions, "filters": self.filters, "actions": self.actions}

    def __post_init__(self) -> None:
        # Asked for each candidate of every event: computed once per parsed definition.
        object.__setattr__(self, "_condition_facts", facts_to_load(self.conditions))
        object.__setattr__(self, "_filter_facts", facts_to_load(self.filters))
        object.__setattr__(self, "_trigger_filter", json.dumps(
            [self.trigger.subject_kind, dict(self.trigger.metadata)], sort_keys=True, default=str))

    def condition_facts(self) -> WantedFacts:
        facts: WantedFacts = self.__dict__["_condition_facts"]
        return facts

    def filter_facts(self) -> WantedFacts:
        facts: WantedFacts = self.__dict__["_filter_facts"]
        return facts

    def compiled_conditions(self) -> CompiledTree:
        """Phase 3's tree compiled once per parsed definition (made on first use)."""
        return self._compiled("conditions")

    def compiled_filters(self) -> CompiledTree:
        """Phase 4's tree compiled once per parsed definition (made on first use)."""
        return self._compiled("filters")

    def _compiled(self, part: str) -> CompiledTree:
        tree: CompiledTree | None = self.__dict__.get(f"_compiled_{part}")
        if tree is None:
            tree = CompiledTree(getattr(self, part), part)
            object.__setattr__(self, f"_compiled_{part}", tree)
        return tree

    def trigger_filter(self) -> str:
        """Phase 2's test as a key (the subject kind and metadata wanted): rules with the
        same key are kept or dropped together."""
        key: str = self.__dict__["_trigger_filter"]
        return key


def parse_rule(data: object, template_check: TemplateCheck = check_with_sandbox,
               path: str = "") -> RuleDefinition:
    """A rule definition from its JSON, or InvalidRule with every error and its path."""
    errors = rule_errors(data, template_check, path)
    if errors:
        raise InvalidRule(errors)
    assert isinstance(data, dict)
    return _build(data)


def stored_rule(data: Mapping[str, Any]) -> RuleDefinition:
    """A definition read back from the rules table: validated when it was saved."""
    return _build(data)


def _build(data: Mapping[str, Any]) -> RuleDefinition:
    trigger = data.get("trigger") or {}
    actions = dict(data["actions"])
    actions.setdefault("critical", False)
    if data["kind"] == "time":
        actions.setdefault("category", TIME_CATEGORY)
    due, tat = trigger.get("due"), trigger.get("turnaround")
    return RuleDefinition(
        name=data["name"].strip(), product=data["product"], kind=data["kind"],
        trigger=Trigger(tuple(trigger.get("types") or ()), trigger.get("subject_kind"),
                        dict(trigger.get("metadata") or {}),
                        DueDate(due["fact"], tuple(sorted(due["offsets"])),
                                bool(due.get("business_days", False))) if due else None,
                        Turnaround(tat["after"], tat.get("hours"), tat.get("days"),
                                   bool(tat.get("business_days", False))) if tat else None),
        conditions=data.get("conditions") or EMPTY_TREE, filters=data.get("filters") or EMPTY_TREE,
        actions=actions, enabled=data.get("enabled"))


def rule_errors(data: object, template_check: TemplateCheck = check_with_sandbox,
                path: str = "") -> list[PathError]:
    """Every error in a rule definition; ``path`` prefixes each (e.g. "[3]" in an import)."""
    def at(key: str) -> str:
        return f"{path}.{key}" if path else key

    if not isinstance(data, dict):
        return [PathError(path or "$", "a rule definition is a JSON object")]
    errors: list[PathError] = _nul_errors(data, path)

    def err(key: str, message: str) -> None:
        errors.append(PathError(at(key), message))

    for extra in sorted(set(data) - set(_TOP_KEYS)):
        err(extra, f"unknown key (a rule has {', '.join(_TOP_KEYS)})")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        err("name", "a rule needs a name")
    elif len(name.strip()) > MAX_NAME:
        err("name", f"at most {MAX_NAME} characters")
    if not isinstance(data.get("product"), str) or not CODE.fullmatch(data["product"]):
        err("product", "a product code such as 'fraud' (lower case letters, digits, _)")
    kind = data.get("kind")
    if kind not in KINDS:
        err("kind", f"{kind!r} is not a rule kind: use created, updated or time")
    if kind == "time":
        _time_trigger_errors(data.get("trigger"), at("trigger"), errors)
    else:
        _trigger_errors(data.get("trigger"), kind, at("trigger"), errors)
    for key in ("conditions", "filters"):
        if key in data:
            found = validate(data[key], at(key))
            errors.extend(found)
            if kind == "time" and not found:
                errors.extend(_eventless_errors(data[key], at(key)))
    _action_errors(data.get("actions"), at("actions"), template_check, errors,
                   time_rule=kind == "time")
    if "enabled" in data and not isinstance(data["enabled"], bool):
        err("enabled", "true or false")
    return errors


NUL_REFUSED = "must not contain the NUL character (\\u0000): PostgreSQL cannot store it"


def _nul_errors(data: object, path: str) -> list[PathError]:
    """Every text (value or key) holding the NUL character, at its path: PostgreSQL's text
    and jsonb cannot store it, so it is refused here rather than failing the statement.
    Walked without recursion (a definition from Python may be nested anywhere)."""
    errors: list[PathError] = []
    pending: list[tuple[object, str]] = [(data, path)]
    while pending:
        value, at = pending.pop()
        if isinstance(value, str):
            if "\x00" in value:
                errors.append(PathError(at or "$", NUL_REFUSED))
        elif isinstance(value, list):
            pending.extend((v, f"{at}[{i}]") for i, v in enumerate(value))
        elif isinstance(value, dict):
            for key, v in value.items():
                where = f"{at}.{key}" if at else str(key)
                if isinstance(key, str) and "\x00" in key:
                    errors.append(PathError(where.replace("\x00", "\\u0000"), NUL_REFUSED))
                else:
                    pending.append((v, where))
    return sorted(errors, key=lambda e: e.path)


def _trigger_errors(trigger: object, kind: object, at: str, errors: list[PathError]) -> None:
    if trigger is None:
        trigger = {}
    if not isinstance(trigger, dict):
        errors.append(PathError(at, "the trigger is an object {types, subject_kind, metadata}"))
        return
    for extra in sorted(set(trigger) - {"types", "subject_kind", "metadata"}):
        errors.append(PathError(f"{at}.{extra}", "unknown key (a trigger has types, subject_kind, "
                                "metadata)"))
    types = trigger.get("types")
    if kind == "updated":
        if not isinstance(types, list) or not types:
            errors.append(PathError(f"{at}.types", "an update rule names the trigger types it "
                                    "answers, e.g. [\"assigned\"]"))
        else:
            for i, t in enumerate(types):
                if not isinstance(t, str) or not CODE.fullmatch(t):
                    errors.append(PathError(f"{at}.types[{i}]", f"{t!r} is not a trigger type"))
            if len(set(map(str, types))) != len(types):
                errors.append(PathError(f"{at}.types", "a trigger type is named twice"))
    elif types:
        errors.append(PathError(f"{at}.types", "only update rules have trigger types"))
    sk = trigger.get("subject_kind")
    if sk is not None and (not isinstance(sk, str) or not CODE.fullmatch(sk)):
        errors.append(PathError(f"{at}.subject_kind", f"{sk!r} is not a subject kind"))
    meta = trigger.get("metadata")
    if meta is not None:
        if not isinstance(meta, dict):
            errors.append(PathError(f"{at}.metadata", "an object of event metadata to match"))
        else:
            for key, value in meta.items():
                if not is_scalar(value):
                    errors.append(PathError(f"{at}.metadata.{key}",
                                            "a string, number, boolean or null to match"))
                elif unholdable_number(value):
                    errors.append(PathError(f"{at}.metadata.{key}", NUMBER_WORDS))


def _time_trigger_errors(trigger: object, at: str, errors: list[PathError]) -> None:
    def err(key: str, message: str) -> None:
        errors.append(PathError(f"{at}.{key}" if key else at, message))

    if not isinstance(trigger, dict):
        err("", "a time rule's trigger is an object {subject_kind, due} or {subject_kind, turnaround}")
        return
    for extra in sorted(set(trigger) - {"subject_kind", "due", "turnaround"}):
        err(extra, "unknown key (a time rule's trigger has subject_kind and due or turnaround)")
    sk = trigger.get("subject_kind")
    if sk is not None and (not isinstance(sk, str) or not CODE.fullmatch(sk)):
        err("subject_kind", f"{sk!r} is not a subject kind")
    if ("due" in trigger) == ("turnaround" in trigger):
        err("", "a time rule's trigger has either due or turnaround (exactly one)")
    if "due" in trigger:
        _due_errors(trigger["due"], f"{at}.due", errors)
    if "turnaround" in trigger:
        _turnaround_errors(trigger["turnaround"], f"{at}.turnaround", errors)


def _due_errors(due: object, at: str, errors: list[PathError]) -> None:
    def err(key: str, message: str) -> None:
        errors.append(PathError(f"{at}.{key}" if key else at, message))

    if not isinstance(due, dict):
        err("", "a due date is an object {fact, offsets, business_days}")
        return
    for extra in sorted(set(due) - {"fact", "offsets", "business_days"}):
        err(extra, "unknown key (a due date has fact, offsets, business_days)")
    fact = parse_fact(due.get("fact"))
    if fact is None or fact.family != "field":
        err("fact", f"{due.get('fact')!r} is not a date field: use field.<name> (an ISO date)")
    offsets = due.get("offsets")
    if not isinstance(offsets, list) or not 1 <= len(offsets) <= MAX_OFFSETS:
        err("offsets", f"a list of 1 to {MAX_OFFSETS} offsets in days, e.g. [-30, -7, -1, 0]")
    else:
        for i, o in enumerate(offsets):
            if not isinstance(o, int) or isinstance(o, bool) or not -MAX_OFFSET <= o <= MAX_OFFSET:
                err(f"offsets[{i}]", f"{o!r} is not a whole number of days from -{MAX_OFFSET} "
                    f"to {MAX_OFFSET}")
        if len(set(map(str, offsets))) != len(offsets):
            err("offsets", "an offset is named twice")
    if "business_days" in due and not isinstance(due["business_days"], bool):
        err("business_days", "true or false")


def _turnaround_errors(tat: object, at: str, errors: list[PathError]) -> None:
    def err(key: str, message: str) -> None:
        errors.append(PathError(f"{at}.{key}" if key else at, message))

    if not isinstance(tat, dict):
        err("", "a turnaround is an object {after, hours} or {after, days, business_days}")
        return
    for extra in sorted(set(tat) - {"after", "hours", "days", "business_days"}):
        err(extra, "unknown key (a turnaround has after, hours or days, business_days)")
    if tat.get("after") not in TURNAROUND_AFTER:
        err("after", f"{tat.get('after')!r} is not a timestamp: use {', '.join(TURNAROUND_AFTER)}")
    if ("hours" in tat) == ("days" in tat):
        err("", "a turnaround has hours or days (exactly one)")
    for unit, bound in (("hours", MAX_TURNAROUND_HOURS), ("days", MAX_TURNAROUND_DAYS)):
        if unit in tat:
            n = tat[unit]
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= bound:
                err(unit, f"a whole number of {unit} from 1 to {bound}")
    if "business_days" in tat:
        if not isinstance(tat["business_days"], bool):
            err("business_days", "true or false")
        elif tat["business_days"] and "days" not in tat:
            err("business_days", "business days count days, not hours")


def _eventless_errors(tree: object, at: str) -> list[PathError]:
    """A time rule runs with no event: no event.* fact, no change operator."""
    errors: list[PathError] = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict) and len(node) == 1 and next(iter(node)) in ("all", "any"):
            key, items = next(iter(node.items()))
            for i, item in enumerate(items or []):
                walk(item, f"{where}.{key}[{i}]")
        elif isinstance(node, dict):
            fact = parse_fact(node.get("fact"))
            if fact is not None and fact.family == "event":
                errors.append(PathError(f"{where}.fact", "a time rule has no event: use field.*, "
                                        "form.*, hierarchy.* or subject.* facts"))
            if node.get("op") in CHANGE_OPS:
                errors.append(PathError(f"{where}.op", f"a time rule has no event, so nothing "
                                        f"{node['op']}: compare the current value instead"))

    walk(tree, at)
    return errors


def _action_errors(actions: object, at: str, template_check: TemplateCheck,
                   errors: list[PathError], time_rule: bool = False) -> None:
    def err(key: str, message: str) -> None:
        errors.append(PathError(f"{at}.{key}" if key else at, message))

    if not isinstance(actions, dict):
        err("", "a rule needs actions {channels, category, recipients, template}")
        return
    for extra in sorted(set(actions) - {"channels", "category", "critical", "recipients", "template"}):
        err(extra, "unknown key (actions have channels, category, critical, recipients, template)")
    channels = actions.get("channels")
    if not isinstance(channels, list) or not channels:
        err("channels", f"a non-empty list of {', '.join(CHANNELS)}")
    else:
        for i, c in enumerate(channels):
            if c not in CHANNELS:
                err(f"channels[{i}]", f"{c!r} is not a channel: use {', '.join(CHANNELS)}")
        if len(set(map(str, channels))) != len(channels):
            err("channels", "a channel is named twice")
    categories = TIME_CATEGORIES if time_rule else CATEGORIES
    if time_rule and "category" not in actions:
        pass  # obligation_due by default
    elif actions.get("category") not in categories:
        err("category", f"{actions.get('category')!r} is not a category: use {', '.join(categories)}")
    if "critical" in actions and not isinstance(actions["critical"], bool):
        err("critical", "true or false")
    recipients = actions.get("recipients")
    if not isinstance(recipients, list) or not recipients:
        err("recipients", "a non-empty list of recipients")
    elif len(recipients) > MAX_RECIPIENTS:
        err("recipients", f"at most {MAX_RECIPIENTS} recipients")
    else:
        for i, r in enumerate(recipients):
            _recipient_errors(r, f"{at}.recipients[{i}]", errors)
    template = actions.get("template")
    if not isinstance(template, dict):
        err("template", "an object {title, body} of Liquid templates")
        return
    for extra in sorted(set(template) - {"title", "body"}):
        err(f"template.{extra}", "unknown key (a template has title and body)")
    for part in ("title", "body"):
        text = template.get(part)
        if not isinstance(text, str) or not text.strip():
            err(f"template.{part}", "a non-empty template")
        elif len(text) > MAX_TEMPLATE:
            err(f"template.{part}", f"at most {MAX_TEMPLATE} characters")
        else:
            for problem in template_check(text):
                err(f"template.{part}", problem)


def _recipient_errors(r: object, at: str, errors: list[PathError]) -> None:
    needs = {"assignees": (), "role": ("role",), "head": ("level",), "user": ("email",),
             "address": ("email",)}
    if not isinstance(r, dict) or r.get("type") not in RECIPIENT_TYPES:
        kind = r.get("type") if isinstance(r, dict) else r
        errors.append(PathError(f"{at}.type", f"{kind!r} is not a recipient type: use "
                                f"{', '.join(RECIPIENT_TYPES)}"))
        return
    wanted = needs[r["type"]]
    for extra in sorted(set(r) - {"type", *wanted}):
        errors.append(PathError(f"{at}.{extra}", f"unknown key for a {r['type']} recipient"))
    for key in wanted:
        value = r.get(key)
        ok = isinstance(value, str) and (
            ROLE.fullmatch(value) if key == "role" else CODE.fullmatch(value) if key == "level"
            else len(value) <= EMAIL_MAX_LENGTH and EMAIL_PATTERN.fullmatch(value.strip()))
        if not ok:
            errors.append(PathError(f"{at}.{key}", f"a valid {key} for a {r['type']} recipient"))


# --- what an edit changed ---------------------------------------------------------------


def _flat_conditions(tree: object, at: str) -> dict[str, str]:
    """Leaves by path, as canonical JSON text, for a path-wise comparison."""
    out: dict[str, str] = {}

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict) and len(node) == 1 and next(iter(node)) in ("all", "any"):
            key, items = next(iter(node.items()))
            out[f"{where}"] = key  # the group's own kind (all/any) at its path
            for i, item in enumerate(items or []):
                walk(item, f"{where}.{key}[{i}]")
        else:
            out[where] = json.dumps(node, sort_keys=True)

    walk(tree, at)
    return out


def describe_changes(old: Mapping[str, Any], new: Mapping[str, Any],
                     old_enabled: bool, new_enabled: bool) -> str:
    """A one-line summary of an edit: the top-level keys that changed and, for the
    condition trees, which conditions were changed, added or removed ("" if nothing)."""
    parts: list[str] = []
    for key in ("name", "product", "kind", "trigger", "actions"):
        if json.dumps(old.get(key), sort_keys=True) != json.dumps(new.get(key), sort_keys=True):
            parts.append(f"{key} changed")
    for key in ("conditions", "filters"):
        before = _flat_conditions(old.get(key) or EMPTY_TREE, key)
        after = _flat_conditions(new.get(key) or EMPTY_TREE, key)
        changed = [p for p in after if p in before and before[p] != after[p]]
        added = [p for p in after if p not in before]
        removed = [p for p in before if p not in after]
        for label, paths in (("changed", changed), ("added", added), ("removed", removed)):
            if paths:
                parts.append(f"{label} {', '.join(paths)}")
    if old_enabled != new_enabled:
        parts.append("enabled" if new_enabled else "disabled")
    return "; ".join(parts)

