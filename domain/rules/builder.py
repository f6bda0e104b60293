"""The rules console's form of a rule: what the builder's fields hold, to and from the rule
JSON that domain.rules.definitions validates. Shaping only: every check of the result is parse_rule's
(a value the form cannot even shape, such as a metadata line without '=', is the only error
found here). Also which operators fit a fact's type, for the condition builder's pickers."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from domain.events.json_input import InvalidJson, load_json
from domain.rules.conditions import (
    CHANGE_OPS,
    COMPARE_OPS,
    DATE_OPS,
    EQUALITY_OPS,
    LIST_OPS,
    OPERATORS,
    SUBJECT_FACTS,
    PathError,
)
from domain.rules.diff import NO_VALUE_OPS, OP_WORDS

__all__ = [
    "SUBJECT_FACT_TYPES",
    "TYPES",
    "ConditionRow",
    "FactChoice",
    "RecipientRow",
    "RuleForm",
    "Tree",
    "definition_of",
    "facts_for",
    "form_of",
    "operators_for",
    "subject_fact_choices",
    "typed_value",
    "value_text",
]

TYPES = ("string", "number", "boolean", "date", "list")
_BY_TYPE: dict[str, tuple[str, ...]] = {
    "string": (*EQUALITY_OPS, *LIST_OPS, "contains", "empty", "not_empty", *CHANGE_OPS),
    "number": (*EQUALITY_OPS, *COMPARE_OPS, *LIST_OPS, "empty", "not_empty", *CHANGE_OPS),
    "boolean": (*EQUALITY_OPS, "empty", "not_empty", *CHANGE_OPS),
    "date": (*DATE_OPS, *EQUALITY_OPS, "empty", "not_empty", *CHANGE_OPS),
    "list": ("contains", "empty", "not_empty", *CHANGE_OPS),
}
SUBJECT_FACT_TYPES = {"status": "string", "title": "string", "kind": "string",
                      "external_id": "string", "assignees": "list"}


@dataclass(frozen=True)
class FactChoice:
    name: str  # field.amount, form.intake.q1, hierarchy.region, subject.status, event.form
    type: str | None  # one of TYPES, or None when no value was seen to tell

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]


def subject_fact_choices() -> list[FactChoice]:
    return [FactChoice(f"subject.{n}", SUBJECT_FACT_TYPES[n]) for n in SUBJECT_FACTS]


def operators_for(fact_type: str | None, kind: str) -> list[tuple[str, str]]:
    """(operator, words) that fit a fact of this type; time rules compare no changes."""
    ops = _BY_TYPE.get(fact_type or "", OPERATORS)
    return [(op, OP_WORDS[op]) for op in ops if not (kind == "time" and op in CHANGE_OPS)]


def facts_for(choices: Sequence[FactChoice], kind: str) -> list[FactChoice]:
    """The facts a rule of this kind may name (a time rule has no event)."""
    return [c for c in choices if not (kind == "time" and c.family == "event")]


@dataclass
class ConditionRow:
    fact: str = ""
    op: str = ""
    value: str = ""  # as typed: a list is comma-separated

    @property
    def takes_value(self) -> bool:
        return self.op not in NO_VALUE_OPS


@dataclass
class RecipientRow:
    type: str = "assignees"
    value: str = ""  # the role, the level, or the email, by type


@dataclass
class Tree:
    """A condition tree as the builder shows it: flat rows under all/any, or, for a tree
    that nests groups (written as JSON, imported), its JSON text."""

    join: str = "all"
    rows: list[ConditionRow] = field(default_factory=list)
    json_text: str | None = None


@dataclass
class RuleForm:
    name: str = ""
    product: str = ""
    kind: str = "created"
    types: list[str] = field(default_factory=list)
    subject_kind: str = ""
    metadata: str = ""  # key=value lines
    conditions: Tree = field(default_factory=Tree)
    filters: Tree = field(default_factory=Tree)
    channels: list[str] = field(default_factory=lambda: ["in_app", "email"])
    category: str = "case_alert"
    critical: bool = False
    recipients: list[RecipientRow] = field(default_factory=lambda: [RecipientRow()])
    title: str = ""
    body: str = ""
    # time rules: a due date fact with offsets, or a turnaround
    time_mode: str = "due"
    due_fact: str = ""
    offsets: str = "-30, -7, -1, 0"
    business_days: bool = False
    tat_after: str = "created"
    tat_amount: str = "48"
    tat_unit: str = "hours"


# --- values ----------------------------------------------------------------------------


def value_text(value: object) -> str:
    """A condition value as the builder's text field holds it."""
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(value_text(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _scalar(text: str, fact_type: str | None, op: str) -> object:
    text = text.strip()
    if op in COMPARE_OPS or fact_type == "number":
        try:
            number = float(text)
        except ValueError:
            return text  # validation names what is wrong with it
        return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() \
            else number
    if fact_type == "boolean" and text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def typed_value(row: ConditionRow, fact_type: str | None) -> object:
    """What the JSON holds for a row's text, by operator and the fact's type."""
    if row.op in LIST_OPS:
        return [_scalar(part, fact_type, row.op) for part in row.value.split(",") if part.strip()]
    return _scalar(row.value, fact_type, row.op)


# --- form -> JSON ----------------------------------------------------------------------


def _tree(tree: Tree, types: Mapping[str, str | None], at: str,
          problems: list[PathError]) -> object:
    if tree.json_text is not None:
        try:
            return load_json(tree.json_text, "the tree")
        except InvalidJson as error:
            problems.append(PathError(at, str(error)))
            return {"all": []}
    leaves: list[dict[str, Any]] = []
    for row in tree.rows:
        if not row.fact and not row.value.strip():
            continue  # a row added and left blank (its operator is the list's first)
        leaf: dict[str, Any] = {"fact": row.fact, "op": row.op}
        if row.takes_value:
            leaf["value"] = typed_value(row, types.get(row.fact))
        leaves.append(leaf)
    return {tree.join if tree.join in ("all", "any") else "all": leaves}


def _metadata(text: str, problems: list[PathError]) -> dict[str, object]:
    out: dict[str, object] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            problems.append(PathError("trigger.metadata", f"line {n}: write key=value, such as "
                                      "form=intake"))
            continue
        out[key.strip()] = _scalar(value, None, "equals")
    return out


def _int_or_text(text: str) -> object:
    try:
        return int(text.strip())
    except ValueError:
        return text.strip()


def _time_trigger(form: RuleForm) -> dict[str, Any]:
    trigger: dict[str, Any] = {}
    if form.subject_kind:
        trigger["subject_kind"] = form.subject_kind
    if form.time_mode == "turnaround":
        tat: dict[str, Any] = {"after": form.tat_after,
                               form.tat_unit if form.tat_unit in ("hours", "days") else "hours":
                               _int_or_text(form.tat_amount)}
        if form.business_days and form.tat_unit == "days":
            tat["business_days"] = True
        trigger["turnaround"] = tat
    else:
        offsets = [_int_or_text(o) for o in form.offsets.replace(";", ",").split(",") if o.strip()]
        trigger["due"] = {"fact": form.due_fact, "offsets": offsets,
                          "business_days": form.business_days}
    return trigger


def definition_of(form: RuleForm, types: Mapping[str, str | None]) -> tuple[dict[str, Any],
                                                                             list[PathError]]:
    """The rule JSON the form describes (for parse_rule to judge), and what the form itself
    could not shape, at the JSON path it belongs to."""
    problems: list[PathError] = []
    if form.kind == "time":
        trigger = _time_trigger(form)
    else:
        trigger = {}
        if form.kind == "updated" or form.types:
            trigger["types"] = list(form.types)
        if form.subject_kind:
            trigger["subject_kind"] = form.subject_kind
        metadata = _metadata(form.metadata, problems)
        if metadata:
            trigger["metadata"] = metadata
    recipients: list[dict[str, Any]] = []
    for r in form.recipients:
        key = {"role": "role", "head": "level", "user": "email", "address": "email"}.get(r.type)
        if r.type == "assignees" or key is None:
            recipients.append({"type": r.type})
        else:
            recipients.append({"type": r.type, key: r.value.strip()})
    data = {
        "name": form.name, "product": form.product, "kind": form.kind, "trigger": trigger,
        "conditions": _tree(form.conditions, types, "conditions", problems),
        "filters": _tree(form.filters, types, "filters", problems),
        "actions": {"channels": list(form.channels), "category": form.category,
                    "critical": form.critical, "recipients": recipients,
                    "template": {"title": form.title, "body": form.body}},
    }
    return data, problems


# --- JSON -> form ----------------------------------------------------------------------


def _flat(tree: object) -> Tree:
    if not isinstance(tree, Mapping) or len(tree) != 1 or next(iter(tree)) not in ("all", "any"):
        return Tree()
    join, items = next(iter(tree.items()))
    if any(not isinstance(i, Mapping) or "all" in i or "any" in i for i in items or []):
        return Tree(join, [], json.dumps(tree, indent=2))
    return Tree(join, [ConditionRow(str(i.get("fact", "")), str(i.get("op", "")),
                                    value_text(i.get("value"))) for i in items or []])


def form_of(definition: Mapping[str, Any]) -> RuleForm:
    """The builder's fields for a stored definition."""
    trigger = definition.get("trigger") or {}
    actions = definition.get("actions") or {}
    template = actions.get("template") or {}
    form = RuleForm(
        name=str(definition.get("name", "")), product=str(definition.get("product", "")),
        kind=str(definition.get("kind", "created")), types=list(trigger.get("types") or []),
        subject_kind=str(trigger.get("subject_kind") or ""),
        metadata="\n".join(f"{k}={value_text(v)}" for k, v in (trigger.get("metadata") or {}).items()),
        conditions=_flat(definition.get("conditions") or {"all": []}),
        filters=_flat(definition.get("filters") or {"all": []}),
        channels=list(actions.get("channels") or []), category=str(actions.get("category", "")),
        critical=actions.get("critical") is True,
        recipients=[RecipientRow(str(r.get("type", "")),
                                 str(r.get("role") or r.get("level") or r.get("email") or ""))
                    for r in actions.get("recipients") or []],
        title=str(template.get("title", "")), body=str(template.get("body", "")))
    due, tat = trigger.get("due"), trigger.get("turnaround")
    if isinstance(due, Mapping):
        form.time_mode, form.due_fact = "due", str(due.get("fact", ""))
        form.offsets = ", ".join(str(o) for o in due.get("offsets") or [])
        form.business_days = due.get("business_days") is True
    elif isinstance(tat, Mapping):
        form.time_mode, form.tat_after = "turnaround", str(tat.get("after", "created"))
        form.tat_unit = "days" if "days" in tat else "hours"
        form.tat_amount = str(tat.get(form.tat_unit, ""))
        form.business_days = tat.get("business_days") is True
    return form
