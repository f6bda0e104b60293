"""What changed between two versions of a rule, in words an administrator reads: each
part of the definition as a labelled line ("Condition 2: field.amount is greater than
1000000"), compared part by part; conditions and recipients are compared as sequences, so
removing the first condition reads as one removal, not as every later one changing."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KIND_WORDS",
    "NO_VALUE_OPS",
    "OP_WORDS",
    "Change",
    "condition_lines",
    "describe_condition",
    "describe_recipient",
    "describe_trigger",
    "diff_rules",
    "value_text",
]

OP_WORDS = {
    "equals": "is", "not_equals": "is not", "less": "is less than", "greater": "is greater than",
    "less_or_equal": "is at most", "greater_or_equal": "is at least", "in": "is one of",
    "not_in": "is none of", "contains": "contains", "empty": "is empty",
    "not_empty": "is not empty", "changed": "changed", "changed_to": "changed to",
    "changed_from": "changed from", "before": "is before", "after": "is after",
}
NO_VALUE_OPS = ("empty", "not_empty", "changed")
KIND_WORDS = {"created": "when a subject is created", "updated": "when a subject is updated",
              "time": "on dates (time trigger)"}


@dataclass(frozen=True)
class Change:
    """One difference: what it is about, added / removed / changed, and the two texts."""

    what: str
    change: str  # added | removed | changed
    before: str | None
    after: str | None


def value_text(value: object) -> str:
    if isinstance(value, str):
        return f"“{value}”"
    if isinstance(value, list):
        return ", ".join(value_text(v) for v in value)
    return json.dumps(value)


def describe_condition(leaf: Mapping[str, Any]) -> str:
    """'field.amount is greater than 1000000'."""
    words = OP_WORDS.get(str(leaf.get("op")), str(leaf.get("op")))
    text = f"{leaf.get('fact')} {words}"
    return text if leaf.get("op") in NO_VALUE_OPS else f"{text} {value_text(leaf.get('value'))}"


def describe_recipient(r: Mapping[str, Any]) -> str:
    kind = r.get("type")
    if kind == "assignees":
        return "the subject's assignees"
    if kind == "role":
        return f"holders of the role {r.get('role')}"
    if kind == "head":
        return f"the head of the subject's {r.get('level')}"
    if kind == "user":
        return f"the user {r.get('email')}"
    if kind == "address":
        return f"the address {r.get('email')}"
    return json.dumps(dict(r), sort_keys=True)


def condition_lines(tree: object) -> list[str]:
    """A condition tree as lines: each group's kind, then its leaves, indented by depth."""
    lines: list[str] = []

    def walk(node: object, depth: int) -> None:
        if isinstance(node, Mapping) and len(node) == 1 and next(iter(node)) in ("all", "any"):
            key, items = next(iter(node.items()))
            lines.append("  " * depth + ("all of:" if key == "all" else "any of:"))
            for item in items or []:
                walk(item, depth + 1)
        elif isinstance(node, Mapping):
            lines.append("  " * depth + describe_condition(node))

    walk(tree or {"all": []}, 0)
    return lines


def _time_trigger(trigger: Mapping[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    due = trigger.get("due")
    if isinstance(due, Mapping):
        out.append(("Due date", str(due.get("fact"))))
        offsets = ", ".join(f"{o:+d}" if o else "0" for o in due.get("offsets") or [])
        out.append(("Offsets (days)", offsets))
        out.append(("Counting", "working days" if due.get("business_days") else "calendar days"))
    tat = trigger.get("turnaround")
    if isinstance(tat, Mapping):
        amount = f"{tat['hours']} hours" if "hours" in tat else f"{tat.get('days')} " \
            f"{'working ' if tat.get('business_days') else ''}days"
        out.append(("Turnaround", f"{amount} after {str(tat.get('after')).replace('_', ' ')}"))
    return out


def _parts(definition: Mapping[str, Any], enabled: bool | None) -> list[tuple[str, str]]:
    """The single-valued parts of a definition, labelled, in reading order."""
    trigger = definition.get("trigger") or {}
    actions = definition.get("actions") or {}
    template = actions.get("template") or {}
    parts = [("Name", str(definition.get("name"))), ("Product", str(definition.get("product"))),
             ("Kind", KIND_WORDS.get(str(definition.get("kind")), str(definition.get("kind"))))]
    if trigger.get("types"):
        parts.append(("Trigger types", ", ".join(trigger["types"])))
    parts.append(("Subject kind", str(trigger.get("subject_kind") or "any")))
    for key, value in sorted((trigger.get("metadata") or {}).items()):
        parts.append((f"Event metadata {key}", value_text(value)))
    parts.extend(_time_trigger(trigger))
    for label, key in (("Conditions", "conditions"), ("Filters", "filters")):
        tree = definition.get(key) or {"all": []}
        parts.append((f"{label} match", "all" if "all" in tree else "any"))
    parts += [("Channels", ", ".join(str(c).replace("_", "-") for c in actions.get("channels") or [])),
              ("Category", str(actions.get("category"))),
              ("Critical", "yes" if actions.get("critical") else "no"),
              ("Title template", str(template.get("title", ""))),
              ("Body template", str(template.get("body", "")))]
    if enabled is not None:
        parts.append(("State", "enabled" if enabled else "disabled"))
    return parts


def _sequence(label: str, before: list[str], after: list[str]) -> list[Change]:
    changes: list[Change] = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        if op == "replace":  # the first of each side read as edits, the rest as added/removed
            paired = min(i2 - i1, j2 - j1)
            changes += [Change(f"{label} {j1 + k + 1}", "changed", before[i1 + k], after[j1 + k])
                        for k in range(paired)]
            i1, j1 = i1 + paired, j1 + paired
        changes += [Change(f"{label} {i + 1}", "removed", before[i], None) for i in range(i1, i2)]
        changes += [Change(f"{label} {j + 1}", "added", None, after[j]) for j in range(j1, j2)]
    return changes


def _leaves(tree: object) -> list[str]:
    """The tree's lines without the outermost group's own line (compared as 'match')."""
    return [line[2:] for line in condition_lines(tree)[1:]]


def diff_rules(old: Mapping[str, Any], new: Mapping[str, Any],
               old_enabled: bool | None = None, new_enabled: bool | None = None) -> list[Change]:
    """Every difference from ``old`` to ``new`` (definitions as stored), in reading order:
    the trigger, the condition trees, the recipients, then the rest of the actions."""
    before, after = dict(_parts(old, old_enabled)), dict(_parts(new, new_enabled))
    parts: list[Change] = []
    for label in dict.fromkeys([*before, *after]):
        a, b = before.get(label), after.get(label)
        if a != b:
            parts.append(Change(label, "added" if a is None else "removed" if b is None
                                else "changed", a, b))
    trigger = [c for c in parts if c.what not in _ACTION_LABELS and not c.what.endswith(" match")]
    match = [c for c in parts if c.what.endswith(" match")]
    rest = [c for c in parts if c.what in _ACTION_LABELS]
    trees = _sequence("Condition", _leaves(old.get("conditions")), _leaves(new.get("conditions")))
    trees += _sequence("Filter", _leaves(old.get("filters")), _leaves(new.get("filters")))
    recipients = _sequence(
        "Recipient",
        [describe_recipient(r) for r in (old.get("actions") or {}).get("recipients") or []],
        [describe_recipient(r) for r in (new.get("actions") or {}).get("recipients") or []])
    return trigger + match + trees + recipients + rest


_ACTION_LABELS = frozenset({"Channels", "Category", "Critical", "Title template", "Body template",
                            "State"})


def describe_trigger(definition: Mapping[str, Any]) -> str:
    """When a rule runs, in one line: 'When a case is updated (assigned, status changed)',
    '-30, -7, 0 days from field.calibration_due', '48 hours after assigned'."""
    trigger = definition.get("trigger") or {}
    kind = str(definition.get("kind"))
    subject = str(trigger.get("subject_kind") or "subject")
    if kind == "time":
        parts = dict(_time_trigger(trigger))
        if "Turnaround" in parts:
            return f"{parts['Turnaround']} (each {subject})"
        return f"{parts.get('Offsets (days)', '')} {parts.get('Counting', '')} from " \
               f"{parts.get('Due date', '')} (each {subject})"
    article = "an" if subject[:1] in "aeiou" else "a"
    text = f"When {article} {subject} is {'created' if kind == 'created' else 'updated'}"
    if trigger.get("types"):
        text += f" ({', '.join(str(t).replace('_', ' ') for t in trigger['types'])})"
    return text
