"""`tocsin rules ...`: a tenant's event rules from the command line, as JSON files.

    tocsin rules list --tenant T [--product P]
    tocsin rules show --tenant T ID
    tocsin rules create --tenant T FILE.json|-        (--by NAME, default cli)
    tocsin rules update --tenant T ID FILE.json|-
    tocsin rules enable|disable --tenant T ID
    tocsin rules export --tenant T [--product P] > rules.json
    tocsin rules import --tenant T rules.json|-       (all or nothing)
    tocsin rules dry-run --tenant T ID --subject N|--event N   (nothing is claimed)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import Any

from domain.errors import InvalidInput
from domain.events.json_input import load_json
from domain.people.identity import valid_slug
from tocsin.core.clock import utcnow

__all__ = [
    "Command",
    "add_rules_commands",
    "cmd_rules_create",
    "cmd_rules_disable",
    "cmd_rules_dry_run",
    "cmd_rules_enable",
    "cmd_rules_export",
    "cmd_rules_import",
    "cmd_rules_list",
    "cmd_rules_show",
    "cmd_rules_update",
]

Command = Callable[..., argparse.ArgumentParser]


def _out(line: str = "") -> None:
    print(line, flush=True)


def _read_json(name: str) -> Any:
    """A JSON document from a file, or from stdin for '-' (domain/events/json_input.py: nesting
    checked before parsing; a number no double holds is refused by validation, at its path)."""
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidInput(f"cannot read {name}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"{name} is not UTF-8 text") from None
    return load_json(text, "stdin" if name == "-" else name)


def _product(text: str | None) -> str | None:
    from domain.rules.definitions import CODE

    if text is not None and not CODE.fullmatch(text):
        raise InvalidInput(f"invalid product code {text!r}")
    return text


def cmd_rules_list(args: argparse.Namespace) -> None:
    from db.platform.tenancy import tenant_tx
    from db.rules.definitions import list_rules

    with tenant_tx(valid_slug(args.tenant)) as tx:
        rules = list_rules(tx, _product(args.product))
    if not rules:
        _out("No rules yet. Create one with `tocsin rules create --tenant T rule.json`.")
        return
    _out(f"{'ID':>5}  {'PRODUCT':<12} {'KIND':<8} {'ENABLED':<8} {'VERSION':>7}  {'TRIGGERS':<24} NAME")
    for r in rules:
        triggers = ",".join(r.definition.trigger.types) or "-"
        _out(f"{r.id:>5}  {r.product:<12} {r.kind:<8} {'yes' if r.enabled else 'no':<8} "
             f"{r.version:>7}  {triggers:<24} {r.name}")


def cmd_rules_show(args: argparse.Namespace) -> None:
    from db.platform.tenancy import tenant_tx
    from db.rules.definitions import get_rule, rule_versions

    with tenant_tx(valid_slug(args.tenant)) as tx:
        rule = get_rule(tx, args.id)
        versions = rule_versions(tx, args.id)
    _out(f"rule {rule.id} ({rule.product}/{rule.name}), version {rule.version}, "
         f"{'enabled' if rule.enabled else 'disabled'}")
    _out(json.dumps(rule.to_json(), indent=2, sort_keys=True))
    _out()
    _out(f"{'VERSION':>7}  {'CHANGED (UTC)':<16}  {'BY':<20} SUMMARY")
    for v in versions:
        _out(f"{v.version:>7}  {v.changed_at.astimezone(UTC):%Y-%m-%d %H:%M}  {v.changed_by:<20} "
             f"{v.summary}")


def cmd_rules_create(args: argparse.Namespace) -> None:
    from db.platform.tenancy import tenant_tx
    from db.rules.definitions import create_rule

    data = _read_json(args.file)
    with tenant_tx(valid_slug(args.tenant)) as tx:
        rule = create_rule(tx, data, args.by)
    _out(f"created rule {rule.id} ({rule.product}/{rule.name}), version {rule.version}")


def cmd_rules_update(args: argparse.Namespace) -> None:
    from db.platform.tenancy import tenant_tx
    from db.rules.definitions import get_rule, rule_versions, update_rule

    data = _read_json(args.file)
    with tenant_tx(valid_slug(args.tenant)) as tx:
        before = get_rule(tx, args.id).version
        rule = update_rule(tx, args.id, data, args.by)
        summary = rule_versions(tx, args.id)[-1].summary
    if rule.version == before:
        _out(f"rule {rule.id} unchanged (version {rule.version})")
    else:
        _out(f"updated rule {rule.id} to version {rule.version}: {summary}")


def _set_enabled(args: argparse.Namespace, enabled: bool) -> None:
    from db.platform.tenancy import tenant_tx
    from db.rules.definitions import set_enabled

    with tenant_tx(valid_slug(args.tenant)) as tx:
        rule = set_enabled(tx, args.id, enabled, args.by)
    _out(f"rule {rule.id} {'enabled' if rule.enabled else 'disabled'} (version {rule.version})")


def cmd_rules_enable(args: argparse.Namespace) -> None:
    _set_enabled(args, True)


def cmd_rules_disable(args: argparse.Namespace) -> None:
    _set_enabled(args, False)


def cmd_rules_export(args: argparse.Namespace) -> None:
    from db.platform.tenancy import tenant_tx
    from db.rules.definitions import export_rules

    with tenant_tx(valid_slug(args.tenant)) as tx:
        rules = export_rules(tx, _product(args.product))
    sys.stdout.write(json.dumps(rules, indent=2, sort_keys=True) + "\n")
    sys.stdout.flush()


def cmd_rules_import(args: argparse.Namespace) -> None:
    from db.platform.tenancy import tenant_tx
    from db.rules.definitions import import_rules

    data = _read_json(args.file)
    with tenant_tx(valid_slug(args.tenant)) as tx:
        report = import_rules(tx, data, args.by)
    _out(f"imported {len(report.created) + len(report.updated) + len(report.unchanged)} rule(s): "
         f"created {len(report.created)}, updated {len(report.updated)}, "
         f"unchanged {len(report.unchanged)}")


def cmd_rules_dry_run(args: argparse.Namespace) -> None:
    """The rule against a subject or event: each step, each condition with the value seen,
    and why it would not fire (db/rules/dry_run.py, as the console's dry run)."""

    from db.platform.tenancy import tenant_tx
    from db.rules.dry_run import dry_run_rule
    from domain.rules.diff import describe_condition

    with tenant_tx(valid_slug(args.tenant)) as tx:
        result = dry_run_rule(tx, args.id, subject_id=args.subject, event_id=args.event,
                              as_of=utcnow())
    _out(f"rule {args.id} ({result.rule_name}), version {result.rule_version}, "
         f"against {result.against}")
    _out(f"verdict: {'WOULD FIRE' if result.fires else 'would NOT fire'}")
    for check in result.checks:
        _out(f"  [{'ok' if check.passed else 'NO'}] {check.step}: {check.detail}")
    for m in result.milestones:
        _out(f"  milestone {m.threshold}: {m.starts} .. {m.ends or 'open-ended'}"
             f"{'  <- today' if m.current else ''}")
    for label, traces in (("conditions", result.conditions), ("filters", result.filters)):
        for t in traces:
            seen = "missing" if t.missing else json.dumps(t.seen)
            words = describe_condition({"fact": t.fact, "op": t.op, "value": t.expected})
            _out(f"  {label[:-1]} {t.path}: {words} -> {str(t.result).lower()} (seen {seen})"
                 f"{' ' + t.reason if t.reason else ''}")
    if not result.fires:
        _out("why not:")
        for why in result.why_not:
            _out(f"  - {why}")


def add_rules_commands(sub: argparse._SubParsersAction[Any], command: Command) -> None:
    """Register `tocsin rules ...` on the top-level subparsers; ``command(name, handler,
    help, parent)`` is cli.build_parser's helper."""
    rules = sub.add_parser("rules", help="create, list, export and import event rules (JSON)")
    rules_sub = rules.add_subparsers(dest="rules_command", required=True,
                                     parser_class=type(rules))

    def tenant_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--tenant", required=True)

    def by_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--by", default="cli", help="who makes the change (default: cli)")

    p = command("list", cmd_rules_list, "list the tenant's event rules", rules_sub)
    tenant_arg(p)
    p.add_argument("--product", help="only this product's rules")
    p = command("show", cmd_rules_show, "show a rule's definition and version history", rules_sub)
    tenant_arg(p)
    p.add_argument("id", type=int)
    p = command("create", cmd_rules_create, "create a rule from a JSON file (- for stdin)", rules_sub)
    tenant_arg(p)
    by_arg(p)
    p.add_argument("file")
    p = command("update", cmd_rules_update, "save a new version of a rule from a JSON file", rules_sub)
    tenant_arg(p)
    by_arg(p)
    p.add_argument("id", type=int)
    p.add_argument("file")
    for name, handler in (("enable", cmd_rules_enable), ("disable", cmd_rules_disable)):
        p = command(name, handler, f"{name} a rule (a new version)", rules_sub)
        tenant_arg(p)
        by_arg(p)
        p.add_argument("id", type=int)
    p = command("export", cmd_rules_export, "print the rules as a JSON list, importable", rules_sub)
    tenant_arg(p)
    p.add_argument("--product", help="only this product's rules")
    p = command("dry-run", cmd_rules_dry_run,
                "evaluate a rule against a subject or an event, claiming nothing", rules_sub)
    tenant_arg(p)
    p.add_argument("id", type=int)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--subject", type=int, help="a subject's id (as the console lists it)")
    target.add_argument("--event", type=int, help="an event's id")
    p = command("import", cmd_rules_import,
                "create or update rules by (product, name) from a JSON list, all or nothing", rules_sub)
    tenant_arg(p)
    by_arg(p)
    p.add_argument("file")
