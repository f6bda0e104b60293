"""The rules console for a tenant's administrators: the rules of each product with their
state, last firing and claim counts; enable, disable, duplicate; export and import (the
same JSON as `tocsin rules export/import`); every version with what changed. The builder
(create, edit, preview) is portal/routes/rule_builder.py, the dry run rule_dry_run.py."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import anyio.to_thread
from litestar import Request, Response, get, post
from litestar.params import FromPath, QueryParameter
from litestar.plugins.htmx import HTMXRequest
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER, HTTP_422_UNPROCESSABLE_ENTITY

from db.delivery.inbox import unread_count
from db.events.products import Product, list_products
from db.platform.tenancy import TenantTx, tenant_tx
from db.rules.definitions import (
    Rule,
    create_rule,
    export_rules,
    get_rule,
    import_rules,
    list_rules,
    rule_versions,
    set_enabled,
)
from db.rules.stats import NEVER, rule_stats
from domain.errors import Conflict, Forbidden, InvalidInput
from domain.events.json_input import InvalidJson, load_json
from domain.messages import N_
from domain.rules.definitions import CODE, InvalidRule
from domain.rules.diff import describe_trigger, diff_rules
from portal.auth import CurrentViewer, Viewer
from tocsin.core.clock import utcnow

__all__ = [
    "DONE",
    "DUPLICATE_TRIES",
    "IMPORT_MAX_BYTES",
    "ROUTES",
    "Back",
    "Product_",
    "RuleLine",
    "admin_only",
    "base_context",
    "chosen_product",
    "copy_name",
    "disable_rule",
    "duplicate_rule",
    "enable_rule",
    "export_rules_json",
    "import_rules_form",
    "list_context",
    "rule_history",
    "rule_lines",
    "rules_list",
]

IMPORT_MAX_BYTES = 2 * 1024 * 1024  # bytes of an uploaded rules file (1,000 rules fit)
DUPLICATE_TRIES = 20  # "Copy of X (n)" names tried before giving up
DONE = {
    "imported": N_("Import done."),
    "enabled": N_("Rule enabled."),
    "disabled": N_("Rule disabled."),
}

Product_ = Annotated[str, QueryParameter(max_length=32)]


def admin_only(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise Forbidden("only administrators edit rules")
    return viewer


def base_context(tx: TenantTx, viewer: Viewer) -> dict[str, Any]:
    return {"viewer": viewer, "unread": unread_count(tx, viewer.user.id), "section": "rules"}


def chosen_product(products: list[Product], code: str | None,
                   with_rules: Collection[str] = ()) -> Product | None:
    """The product asked for, or else the first one that has rules (the built-in manual
    product comes first by name, and is empty in a tenant whose host sends events), or else
    the first."""
    if code:
        for p in products:
            if p.code == code:
                return p
        raise InvalidInput(f"no product {code!r}: choose one from the list")
    return next((p for p in products if p.code in with_rules), products[0] if products else None)


@dataclass(frozen=True)
class RuleLine:
    """A rule as the list shows it."""

    rule: Rule
    when: str
    last_fired: datetime | None
    recent: int
    total: int


def rule_lines(tx: TenantTx, rules: list[Rule]) -> list[RuleLine]:
    stats = rule_stats(tx, [r.id for r in rules])
    lines = []
    for r in rules:
        s = stats.get(r.id, NEVER)
        lines.append(RuleLine(r, describe_trigger(r.definition.to_json()), s.last_fired, s.recent, s.total))
    return lines


@get("/rules", sync_to_thread=True)
def rules_list(viewer: CurrentViewer, product: Product_ = "",
               done: Annotated[str, QueryParameter(max_length=20)] = "") -> Template:
    admin_only(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        context = list_context(tx, viewer, product or None)
    return Template("rules.html", context=context | {
        "notice": DONE.get(done), "import_errors": None, "import_text": ""})


def list_context(tx: TenantTx, viewer: Viewer, product: str | None) -> dict[str, Any]:
    products = list_products(tx)
    every = list_rules(tx)
    current = chosen_product(products, product, {r.product for r in every})
    return base_context(tx, viewer) | {
        "products": products, "product": current,
        "lines": rule_lines(tx, [r for r in every if current and r.product == current.code]),
        "counts": Counter(r.product for r in every)}


def _row(viewer: Viewer, rule_id: int, enabled: bool) -> tuple[RuleLine, dict[str, Any]]:
    with tenant_tx(viewer.tenant.slug) as tx:
        rule = set_enabled(tx, rule_id, enabled, viewer.user.email)
        line = rule_lines(tx, [rule])[0]
        context = base_context(tx, viewer)
    return line, context


def _switch(request: HTMXRequest, viewer: Viewer, rule_id: int, enabled: bool,
            back: str) -> Template | Redirect:
    admin_only(viewer)
    line, context = _row(viewer, rule_id, enabled)
    if not request.htmx and back == "rule":
        return Redirect(f"/rules/{rule_id}?saved={'enabled' if enabled else 'disabled'}",
                        status_code=HTTP_303_SEE_OTHER)
    if not request.htmx:
        return Redirect(f"/rules?product={line.rule.product}&done={'enabled' if enabled else 'disabled'}",
                        status_code=HTTP_303_SEE_OTHER)
    return Template("_rule_row.html", context=context | {"line": line, "changed": True})


Back = Annotated[str, QueryParameter(max_length=10)]


@post("/rules/{rule_id:int}/enable", sync_to_thread=True)
def enable_rule(request: HTMXRequest, viewer: CurrentViewer, rule_id: FromPath[int],
                back: Back = "") -> Template | Redirect:
    return _switch(request, viewer, rule_id, True, back)


@post("/rules/{rule_id:int}/disable", sync_to_thread=True)
def disable_rule(request: HTMXRequest, viewer: CurrentViewer, rule_id: FromPath[int],
                 back: Back = "") -> Template | Redirect:
    return _switch(request, viewer, rule_id, False, back)


def copy_name(name: str, n: int) -> str:
    return f"Copy of {name}" if n == 1 else f"Copy of {name} ({n})"


@post("/rules/{rule_id:int}/duplicate", sync_to_thread=True)
def duplicate_rule(viewer: CurrentViewer, rule_id: FromPath[int]) -> Redirect:
    """A copy of the rule's current version, disabled, named 'Copy of ...'."""
    admin_only(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        source = get_rule(tx, rule_id)
        for n in range(1, DUPLICATE_TRIES + 1):
            data = {**source.definition.to_json(), "enabled": False,
                    "name": copy_name(source.name, n)[:200]}
            try:
                copy = create_rule(tx, data, viewer.user.email)
                break
            except Conflict:
                continue
        else:
            raise Conflict(f"there are {DUPLICATE_TRIES} copies of {source.name!r} already")
    return Redirect(f"/rules/{copy.id}?saved=duplicated", status_code=HTTP_303_SEE_OTHER)


@get("/rules/export.json", sync_to_thread=True)
def export_rules_json(viewer: CurrentViewer, product: Product_ = "") -> Response[bytes]:
    admin_only(viewer)
    if product and not CODE.fullmatch(product):
        raise InvalidInput("choose a product from the list")
    with tenant_tx(viewer.tenant.slug) as tx:
        rules = export_rules(tx, product or None)
    stamp = utcnow().strftime("%Y%m%d-%H%M%S")
    name = f"tocsin-rules-{viewer.tenant.slug}{'-' + product if product else ''}-{stamp}.json"
    # Exactly what `tocsin rules export` prints, so either imports the other's file.
    body = (json.dumps(rules, indent=2, sort_keys=True) + "\n").encode()
    return Response(body, media_type="application/json",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


def _import(viewer: Viewer, text: str) -> tuple[str | None, list[str]]:
    """The import's report line, or the errors of a refused import (nothing saved)."""
    try:
        data = load_json(text, "the file")
    except InvalidJson as error:
        return None, [str(error)]
    try:
        with tenant_tx(viewer.tenant.slug) as tx:
            report = import_rules(tx, data, viewer.user.email)
    except InvalidRule as refused:
        return None, [str(e) for e in refused.errors]
    return (f"Imported {len(report.created) + len(report.updated) + len(report.unchanged)} rule(s): "
            f"created {len(report.created)}, updated {len(report.updated)}, "
            f"unchanged {len(report.unchanged)}."), []


@post("/rules/import", request_max_body_size=IMPORT_MAX_BYTES)
async def import_rules_form(request: Request[Any, Any, Any], viewer: CurrentViewer) -> Template:
    """Rules from an uploaded JSON file (or pasted), all or nothing, by (product, name)."""
    admin_only(viewer)
    form = await request.form()
    upload = form.get("file")
    text = ""
    if upload is not None and not isinstance(upload, str):
        raw = await upload.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput("the rules file is not UTF-8 text") from None
    if not text.strip():
        pasted = form.get("rules_json")
        text = pasted if isinstance(pasted, str) else ""
    if not text.strip():
        raise InvalidInput("choose a rules file (JSON, as exported) or paste its content")
    report, errors = await anyio.to_thread.run_sync(_import, viewer, text)

    def page() -> dict[str, Any]:
        with tenant_tx(viewer.tenant.slug) as tx:
            return list_context(tx, viewer, None)

    context = await anyio.to_thread.run_sync(page)
    return Template("rules.html", status_code=HTTP_422_UNPROCESSABLE_ENTITY if errors else 200,
                    context=context | {"notice": report, "import_errors": errors,
                                       "import_text": text if errors and len(text) < 20_000 else ""})


@get("/rules/{rule_id:int}/history", sync_to_thread=True)
def rule_history(viewer: CurrentViewer, rule_id: FromPath[int]) -> Template:
    """Every version, newest first, each with who saved it, when, and what it changed."""
    admin_only(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        rule = get_rule(tx, rule_id)
        versions = rule_versions(tx, rule_id)
        context = base_context(tx, viewer)
    entries = []
    for i, v in enumerate(versions):
        before = versions[i - 1] if i else None
        changes = diff_rules(before.definition, v.definition, before.enabled, v.enabled) \
            if before else []
        entries.append({"version": v, "changes": changes, "first": before is None})
    entries.reverse()
    return Template("rule_history.html", context=context | {
        "rule": rule, "entries": entries,
        "definition": json.dumps(rule.to_json(), indent=2, sort_keys=True)})


ROUTES = [rules_list, enable_rule, disable_rule, duplicate_rule, export_rules_json,
          import_rules_form, rule_history]
