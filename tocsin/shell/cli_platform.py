"""`tocsin apikey ...`, `tocsin product ...` and `tocsin hierarchy ...`: the platform's
set-up commands. Errors reach tocsin.shell.cli's one mapping to exit codes."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from domain.people.identity import valid_slug

__all__ = [
    "Command",
    "add_platform_commands",
    "cmd_apikey_create",
    "cmd_apikey_list",
    "cmd_apikey_revoke",
    "cmd_hierarchy_add",
    "cmd_product_create",
    "cmd_product_list",
]

Command = Callable[..., argparse.ArgumentParser]


def _out(line: str = "") -> None:
    print(line, flush=True)


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else f"{moment.astimezone(UTC):%Y-%m-%d %H:%M}"


def cmd_apikey_create(args: argparse.Namespace) -> None:
    from db.events.api_keys import create_api_key

    record, key = create_api_key(args.tenant, args.label)
    _out(f"created API key {record.id} ({record.label}) for tenant {record.tenant_slug}")
    _out(f"key: {key}")
    _out("This is the only time the key is shown: store it now (Tocsin keeps only its hash).")


def cmd_apikey_list(args: argparse.Namespace) -> None:
    from db.events.api_keys import list_api_keys

    keys = list_api_keys(args.tenant)
    if not keys:
        _out("No API keys yet. Create one with `tocsin apikey create --tenant T --label L`.")
        return
    _out(f"{'ID':>5}  {'PREFIX':<14} {'CREATED (UTC)':<16}  {'LAST USED':<16}  {'REVOKED':<16}  LABEL")
    for k in keys:
        _out(f"{k.id:>5}  {k.prefix + '…':<14} {_when(k.created_at):<16}  {_when(k.last_used_at):<16}  "
             f"{_when(k.revoked_at):<16}  {k.label}")


def cmd_apikey_revoke(args: argparse.Namespace) -> None:
    from db.events.api_keys import revoke_api_key

    record = revoke_api_key(args.tenant, args.id)
    _out(f"revoked API key {record.id} ({record.label}) of tenant {record.tenant_slug} "
         f"at {_when(record.revoked_at)} UTC; requests with it are refused from now on")


def _list(text: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (text or "").split(",") if part.strip())


def cmd_product_create(args: argparse.Namespace) -> None:
    from db.events.products import DEFAULT_TRIGGERS, create_product
    from db.platform.tenancy import tenant_tx

    with tenant_tx(valid_slug(args.tenant)) as tx:
        product = create_product(tx, args.code, args.name, _list(args.kinds),
                                 _list(args.triggers) or DEFAULT_TRIGGERS)
    kinds = ", ".join(product.subject_kinds) or "any"
    _out(f"created product {product.code} ({product.name}); subject kinds: {kinds}; "
         f"triggers: {', '.join(product.trigger_types)}")


def cmd_product_list(args: argparse.Namespace) -> None:
    from db.events.products import list_products
    from db.platform.tenancy import tenant_tx

    with tenant_tx(valid_slug(args.tenant)) as tx:
        products = list_products(tx)
    if not products:
        _out("No products yet. Create one with `tocsin product create --tenant T CODE NAME`.")
        return
    _out(f"{'CODE':<16} {'KINDS':<24} {'TRIGGERS':<60} NAME")
    for p in products:
        kinds = ",".join(p.subject_kinds) or "(any)"
        _out(f"{p.code:<16} {kinds:<24} {','.join(p.trigger_types):<60} {p.name}")


def cmd_hierarchy_add(args: argparse.Namespace) -> None:
    from db.events.products import add_unit
    from db.platform.tenancy import tenant_tx

    with tenant_tx(valid_slug(args.tenant)) as tx:
        unit = add_unit(tx, args.level, args.code, args.name, args.head)
    head = f", headed by {unit.head_email}" if unit.head_email else ""
    _out(f"added {unit.level} {unit.code} ({unit.name}){head}")


def _positive_id(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def add_platform_commands(sub: argparse._SubParsersAction[Any], command: Command) -> None:
    """Add the platform's groups to the `tocsin` parser (``command`` is cli.build_parser's)."""
    apikey = sub.add_parser("apikey", help="create, list and revoke a tenant's events API keys")
    apikey_sub = apikey.add_subparsers(dest="apikey_command", required=True, parser_class=type(apikey))
    p = command("create", cmd_apikey_create, "create an API key (printed once, stored hashed)", apikey_sub)
    p.add_argument("--tenant", required=True)
    p.add_argument("--label", required=True, help="what the key is for, e.g. 'case system'")
    p = command("list", cmd_apikey_list, "list the API keys (prefix, last use, revocation)", apikey_sub)
    p.add_argument("--tenant", required=True)
    p = command("revoke", cmd_apikey_revoke, "revoke an API key, from its next request on", apikey_sub)
    p.add_argument("--tenant", required=True)
    p.add_argument("id", type=_positive_id, help="the key's id (see `tocsin apikey list`)")

    product = sub.add_parser("product", help="register host products (fraud, whistle, ...)")
    product_sub = product.add_subparsers(dest="product_command", required=True,
                                         parser_class=type(product))
    p = command("create", cmd_product_create, "register a product and its vocabulary", product_sub)
    p.add_argument("--tenant", required=True)
    p.add_argument("code", help="lower-case code, e.g. fraud")
    p.add_argument("name")
    p.add_argument("--kinds", help="subject kinds, comma-separated, e.g. case,alert (default: any)")
    p.add_argument("--triggers", help="update trigger types, comma-separated (default: field_changed,"
                                      "status_changed,assigned,form_submitted,message_posted)")
    p = command("list", cmd_product_list, "list a tenant's products", product_sub)
    p.add_argument("--tenant", required=True)

    hierarchy = sub.add_parser("hierarchy", help="the tenant's departments, regions, ... and their heads")
    hierarchy_sub = hierarchy.add_subparsers(dest="hierarchy_command", required=True,
                                             parser_class=type(hierarchy))
    p = command("add", cmd_hierarchy_add, "add a unit of a hierarchy level", hierarchy_sub)
    p.add_argument("--tenant", required=True)
    p.add_argument("level", help="e.g. region or department")
    p.add_argument("code", help="the unit's code, as events name it, e.g. north")
    p.add_argument("name")
    p.add_argument("--head", metavar="EMAIL", help="the user who heads the unit")
