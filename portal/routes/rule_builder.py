"""The rule builder: create and edit a rule with a form (the trigger, a condition builder
whose rows are added, removed and re-typed through htmx, the actions, the template with a
live preview). Saving goes through db/rules/definitions.py (create_rule / update_rule, which validate
with domain/rules/definitions.py parse_rule); every error is shown at the field its path names."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import anyio.to_thread
from litestar import Request, get, post
from litestar.datastructures import FormMultiDict
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect, Response, Template
from litestar.status_codes import HTTP_303_SEE_OTHER, HTTP_422_UNPROCESSABLE_ENTITY

from db.delivery.chat_channels import enabled_chat_channels
from db.events.products import Product, list_products
from db.people.sms_settings import sms_available
from db.platform.tenancy import TenantTx, tenant_tx
from db.rules.definitions import Rule, create_rule, get_rule, update_rule
from db.rules.template_preview import preview_templates
from db.rules.vocabulary import facts_seen, recent_subjects
from domain.errors import Conflict, InvalidInput
from domain.people.identity import parse_whole_number
from domain.rules.builder import (
    ConditionRow,
    FactChoice,
    RecipientRow,
    RuleForm,
    Tree,
    definition_of,
    facts_for,
    form_of,
    operators_for,
)
from domain.rules.conditions import PathError
from domain.rules.definitions import (
    CATEGORIES,
    CHANNELS,
    KINDS,
    RECIPIENT_TYPES,
    TIME_CATEGORIES,
    InvalidRule,
    rule_errors,
)
from domain.rules.obligation_dates import TURNAROUND_AFTER, DueDate
from portal.auth import CurrentViewer, Viewer
from portal.routes.rules import admin_only, base_context, chosen_product
from tocsin.core.clock import utcnow

__all__ = [
    "BUILDER_MAX_BYTES",
    "KIND_LABELS",
    "MAX_ROWS",
    "RECIPIENT_LABELS",
    "ROUTES",
    "SAVED",
    "TREES",
    "ErrorIndex",
    "Short",
    "Value",
    "Vocabulary",
    "builder_context",
    "condition_row",
    "create_rule_form",
    "edit_rule",
    "new_rule",
    "preview_rule",
    "read_form",
    "recipient_row",
    "refresh_builder",
    "removed_row",
    "save_rule_form",
]

BUILDER_MAX_BYTES = 256 * 1024  # bytes of a builder form: two templates of 20,000 characters, encoded
MAX_ROWS = 60  # condition rows read from one form (a tree holds at most 50 leaves)
SAVED = {
    "created": "Rule created. Dry-run it against a subject before you enable it.",
    "updated": "Saved as a new version.",
    "unchanged": "Nothing changed: no new version was saved.",
    "duplicated": "This is a copy, disabled until you enable it. Rename it and save.",
    "enabled": "Rule enabled: it runs from now on.",
    "disabled": "Rule disabled: it no longer runs.",
}
TREES = ("conditions", "filters")
KIND_LABELS = {"created": "A subject is created", "updated": "A subject is updated",
               "time": "A date comes near or passes"}
RECIPIENT_LABELS = {"assignees": "The subject's assignees", "role": "Holders of a role",
                    "head": "Head of the subject's unit", "user": "A user (email)",
                    "address": "An email address"}
Short = Annotated[str, QueryParameter(max_length=200)]
Value = Annotated[str, QueryParameter(max_length=1000)]


class ErrorIndex:
    """A save's errors, looked up by the JSON path of the field showing them."""

    def __init__(self, errors: list[PathError]) -> None:
        self.errors = errors

    def under(self, path: str) -> list[str]:
        return [e.message for e in self.errors
                if e.path == path or e.path.startswith((f"{path}.", f"{path}["))]

    def at(self, path: str) -> list[str]:
        return [e.message for e in self.errors if e.path == path]

    def __bool__(self) -> bool:
        return bool(self.errors)


def _text(form: FormMultiDict, name: str, limit: int = 200) -> str:
    value = form.get(name, "")
    if not isinstance(value, str):
        raise InvalidInput(f"{name} is text, not a file")
    if len(value) > limit:
        raise InvalidInput(f"{name.replace('_', ' ')} is longer than {limit} characters")
    return value


def _texts(form: FormMultiDict, name: str, limit: int = 1000) -> list[str]:
    values = [v for v in form.getall(name, []) if isinstance(v, str)]
    if len(values) > MAX_ROWS or any(len(v) > limit for v in values):
        raise InvalidInput(f"too many or too long {name.replace('_', ' ')} values")
    return values


def _tree(form: FormMultiDict, tree: str) -> Tree:
    if tree + "_json" in form:
        return Tree(json_text=_text(form, tree + "_json", 50_000))
    facts, ops, values = (_texts(form, f"{tree}_{part}") for part in ("fact", "op", "value"))
    if not len(facts) == len(ops) == len(values):
        raise InvalidInput("the condition rows are incomplete; reload the page")
    return Tree(_text(form, f"{tree}_join") or "all",
                [ConditionRow(f, o, v) for f, o, v in zip(facts, ops, values, strict=True)])


def read_form(form: FormMultiDict) -> RuleForm:
    """The builder's fields as posted (shaped into JSON by domain.rules.builder)."""
    types, values = _texts(form, "recipient_type"), _texts(form, "recipient_value")
    if len(types) != len(values):
        raise InvalidInput("the recipient rows are incomplete; reload the page")
    return RuleForm(
        name=_text(form, "name", 400), product=_text(form, "product"), kind=_text(form, "kind"),
        types=_texts(form, "types", 64), subject_kind=_text(form, "subject_kind"),
        metadata=_text(form, "metadata", 4000),
        conditions=_tree(form, "conditions"), filters=_tree(form, "filters"),
        channels=_texts(form, "channels", 20), category=_text(form, "category"),
        critical=_text(form, "critical") == "on",
        recipients=[RecipientRow(t, v) for t, v in zip(types, values, strict=True)],
        title=_text(form, "title", 25_000), body=_text(form, "body", 25_000),
        time_mode=_text(form, "time_mode") or "due", due_fact=_text(form, "due_fact"),
        offsets=_text(form, "offsets"), business_days=_text(form, "business_days") == "on",
        tat_after=_text(form, "tat_after") or "created", tat_amount=_text(form, "tat_amount"),
        tat_unit=_text(form, "tat_unit") or "hours")


@dataclass(frozen=True)
class Vocabulary:
    product: Product
    facts: list[FactChoice]

    def types(self) -> dict[str, str | None]:
        return {f.name: f.type for f in self.facts}


def _vocabulary(tx: TenantTx, product: str) -> Vocabulary:
    chosen = chosen_product(list_products(tx), product)
    if chosen is None:
        raise InvalidInput("register a product first (`tocsin product create`)")
    return Vocabulary(chosen, facts_seen(tx, chosen.code))


def _ops(vocabulary: Vocabulary, kind: str) -> Callable[[str], list[tuple[str, str]]]:
    types = vocabulary.types()
    return lambda fact: operators_for(types.get(fact), kind)


def builder_context(tx: TenantTx, viewer: Viewer, form: RuleForm, *, rule: Rule | None,
                    errors: list[PathError] | None = None, saved: str | None = None,
                    enable_now: bool = False) -> dict[str, Any]:
    vocabulary = _vocabulary(tx, form.product)
    facts = facts_for(vocabulary.facts, form.kind)
    date_facts = [f for f in facts if f.family == "field" and f.type == "date"]
    if form.due_fact and form.due_fact not in {f.name for f in date_facts}:
        date_facts.append(FactChoice(form.due_fact, None))
    return base_context(tx, viewer) | {
        "form": form, "rule": rule, "product": vocabulary.product, "facts": facts,
        "date_facts": date_facts, "ops_for": _ops(vocabulary, form.kind),
        "type_of": vocabulary.types().get,
        "errors": ErrorIndex(errors or []), "notice": SAVED.get(saved or ""),
        "subjects": recent_subjects(tx, vocabulary.product.code), "kinds": _kinds(),
        "kind_labels": KIND_LABELS,
        "categories": TIME_CATEGORIES if form.kind == "time" else CATEGORIES,
        "channels": _offered_channels(tx, form.channels),
        "recipient_types": RECIPIENT_TYPES, "recipient_labels": RECIPIENT_LABELS,
        "turnaround_after": TURNAROUND_AFTER, "row_id": _row_id, "enable_now": enable_now}


def _kinds() -> tuple[str, ...]:
    return tuple(KINDS)


def _offered_channels(tx: TenantTx, chosen: list[str]) -> list[str]:
    """The channels a rule may name here: email and the inbox always, Slack and Teams once
    the tenant enabled them, texts once someone gave a mobile number (and any the rule names
    already, so that editing keeps them)."""
    enabled = {str(c) for c in enabled_chat_channels(tx)} | ({"sms"} if sms_available(tx) else set())
    return [c for c in CHANNELS if c in ("email", "in_app") or c in enabled or c in chosen]


def _row_id() -> str:
    return secrets.token_hex(4)


@get("/rules/new", sync_to_thread=True)
def new_rule(viewer: CurrentViewer, product: Annotated[str, QueryParameter(max_length=32)] = "",
             kind: Annotated[str, QueryParameter(max_length=16)] = "created") -> Template:
    admin_only(viewer)
    form = RuleForm(product=product, kind=kind if kind in KINDS else "created",
                    conditions=Tree(rows=[ConditionRow()]))
    if form.kind == "time":
        form.category = "obligation_due"
    with tenant_tx(viewer.tenant.slug) as tx:
        form.product = _vocabulary(tx, product).product.code
        context = builder_context(tx, viewer, form, rule=None)
    return Template("rule_edit.html", context=context)


@get("/rules/{rule_id:int}", sync_to_thread=True)
def edit_rule(viewer: CurrentViewer, rule_id: FromPath[int],
              saved: Annotated[str, QueryParameter(max_length=20)] = "") -> Template:
    admin_only(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        rule = get_rule(tx, rule_id)
        context = builder_context(tx, viewer, form_of(rule.definition.to_json()), rule=rule,
                                  saved=saved)
    return Template("rule_edit.html", context=context)


def _save(viewer: Viewer, rule_id: int | None, form: RuleForm,
          enable_now: bool) -> tuple[Rule | None, str, dict[str, Any]]:
    """Save through the rules store; on refusal, the builder's context with every error."""
    by = viewer.user.email
    with tenant_tx(viewer.tenant.slug) as tx:
        data, problems = definition_of(form, _vocabulary(tx, form.product).types())
        errors = problems + rule_errors(data) if problems else []
        if rule_id is None:
            data["enabled"] = enable_now
        if not errors:
            try:
                with tx.conn.transaction():  # a refused save leaves nothing behind
                    if rule_id is None:
                        return create_rule(tx, data, by), "created", {}
                    before = get_rule(tx, rule_id).version
                    saved = update_rule(tx, rule_id, data, by)
                    return saved, "updated" if saved.version != before else "unchanged", {}
            except InvalidRule as refused:
                errors = refused.errors
            except Conflict as clash:
                errors = [PathError("name", str(clash))]
        rule = None if rule_id is None else get_rule(tx, rule_id)
        return None, "", builder_context(tx, viewer, form, rule=rule, errors=errors,
                                         enable_now=enable_now)


async def _submit(request: Request[Any, Any, Any], viewer: Viewer,
                  rule_id: int | None) -> Template | Redirect:
    admin_only(viewer)
    posted = await request.form()
    form = read_form(posted)
    enable_now = rule_id is None and _text(posted, "enabled") == "on"
    rule, outcome, context = await anyio.to_thread.run_sync(_save, viewer, rule_id, form, enable_now)
    if rule is None:
        return Template("rule_edit.html", context=context, status_code=HTTP_422_UNPROCESSABLE_ENTITY)
    return Redirect(f"/rules/{rule.id}?saved={outcome}", status_code=HTTP_303_SEE_OTHER)


# Paths of their own for the POSTs: Litestar 2.25 double-wraps a sync GET whose path a
# sync POST shares.
@post("/rules/create", request_max_body_size=BUILDER_MAX_BYTES)
async def create_rule_form(request: Request[Any, Any, Any], viewer: CurrentViewer) -> Template | Redirect:
    return await _submit(request, viewer, None)


@post("/rules/{rule_id:int}/save", request_max_body_size=BUILDER_MAX_BYTES)
async def save_rule_form(request: Request[Any, Any, Any], viewer: CurrentViewer,
                         rule_id: FromPath[int]) -> Template | Redirect:
    return await _submit(request, viewer, rule_id)


@post("/rules/builder/refresh", request_max_body_size=BUILDER_MAX_BYTES)
async def refresh_builder(request: Request[Any, Any, Any], viewer: CurrentViewer) -> Template:
    """The builder re-drawn from its own fields (the kind changed: other trigger fields,
    other facts and operators), nothing saved."""
    admin_only(viewer)
    posted = await request.form()
    form = read_form(posted)
    rule_text = _text(posted, "rule_id")
    enable_now = _text(posted, "enabled") == "on"
    if form.kind == "time" and form.category in ("case_alert", "case_update", ""):
        form.category = "obligation_due"

    def context() -> dict[str, Any]:
        with tenant_tx(viewer.tenant.slug) as tx:
            rule = get_rule(tx, parse_whole_number(rule_text, "rule")) if rule_text else None
            return builder_context(tx, viewer, form, rule=rule, enable_now=enable_now)

    return Template("_rule_form.html", context=await anyio.to_thread.run_sync(context))


@get("/rules/builder/row", sync_to_thread=True)
def condition_row(
    viewer: CurrentViewer, tree: Annotated[str, QueryParameter(max_length=16)],
    product: Annotated[str, QueryParameter(max_length=32)],
    kind: Annotated[str, QueryParameter(max_length=16)] = "created",
    conditions_fact: Short = "", conditions_op: Short = "", conditions_value: Value = "",
    filters_fact: Short = "", filters_op: Short = "", filters_value: Value = "",
) -> Template:
    """A condition row: a new one, or one re-drawn for the fact or operator just chosen
    (the operators that fit the fact's type; a value field only where one is taken)."""
    admin_only(viewer)
    if tree not in TREES:
        raise InvalidInput("choose conditions or filters")
    fact, op, value = (conditions_fact, conditions_op, conditions_value) if tree == "conditions" \
        else (filters_fact, filters_op, filters_value)
    with tenant_tx(viewer.tenant.slug) as tx:
        vocabulary = _vocabulary(tx, product)
    ops_for = _ops(vocabulary, kind)
    if fact and op not in {o for o, _ in ops_for(fact)}:
        op = ops_for(fact)[0][0]
    return Template("_rule_condition_row.html", context={
        "tree": tree, "row": ConditionRow(fact, op, value), "facts": facts_for(vocabulary.facts, kind),
        "ops_for": ops_for, "type_of": vocabulary.types().get, "product": vocabulary.product,
        "form": RuleForm(kind=kind),
        "row_errors": [], "row_id": _row_id})


@get("/rules/builder/recipient", sync_to_thread=True)
def recipient_row(viewer: CurrentViewer) -> Template:
    admin_only(viewer)
    return Template("_rule_recipient_row.html", context={
        "recipient": RecipientRow(), "recipient_types": RECIPIENT_TYPES,
        "recipient_labels": RECIPIENT_LABELS, "row_errors": [], "row_id": _row_id})


@get("/rules/builder/removed", sync_to_thread=False)
def removed_row(viewer: CurrentViewer) -> Response[str]:
    """What a removed row is replaced with: nothing (htmx deletes its target)."""
    admin_only(viewer)
    return Response("", media_type="text/html")


def _due_of(form: RuleForm) -> DueDate | None:
    """The due date of a time rule's form, if its fields make one (else no due context)."""
    if form.kind != "time" or form.time_mode == "turnaround" or not form.due_fact:
        return None
    try:
        offsets = tuple(sorted({int(o) for o in form.offsets.replace(";", ",").split(",") if o.strip()}))
    except ValueError:
        return None
    return DueDate(form.due_fact, offsets, form.business_days) if offsets else None


@post("/rules/preview", request_max_body_size=BUILDER_MAX_BYTES)
async def preview_rule(request: Request[Any, Any, Any], viewer: CurrentViewer) -> Template:
    """The title and body rendered in the sandbox against the chosen subject; a template
    the sandbox refuses shows why instead."""
    admin_only(viewer)
    posted = await request.form()
    form = read_form(posted)
    subject = _text(posted, "preview_subject")
    subject_id = parse_whole_number(subject, "choose a subject from the list") if subject else None

    due = _due_of(form)

    def render() -> Any:
        with tenant_tx(viewer.tenant.slug) as tx:
            return preview_templates(
                tx, form.title, form.body, subject_id=subject_id, rule_name=form.name,
                event_type=form.kind if form.kind in ("created", "updated") else None,
                trigger_type=form.types[0] if form.kind == "updated" and form.types else None,
                due=due, as_of=utcnow())

    return Template("_rule_preview.html", context={"preview": await anyio.to_thread.run_sync(render)})


ROUTES = [new_rule, edit_rule, create_rule_form, save_rule_form, refresh_builder, condition_row,
          recipient_row, removed_row, preview_rule]
