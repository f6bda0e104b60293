"""`tocsin evidence ...`: seal, verify and (later commands) sign and export a tenant's
evidence chain. Errors reach tocsin.shell.cli's one mapping to exit codes; a chain that does
not verify is a result, not an error: `verify` exits with EXIT_BROKEN."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "EXIT_BROKEN",
    "add_evidence_commands",
    "cmd_evidence_checkpoint",
    "cmd_evidence_erase_person", "cmd_evidence_export",
    "cmd_evidence_key",
    "cmd_evidence_seal",
    "cmd_evidence_verify",
    "cmd_evidence_verify_pack",
]

EXIT_BROKEN = 4  # `tocsin evidence verify`: a chain, a record or a checkpoint does not hold

Command = Callable[..., argparse.ArgumentParser]


def _out(line: str = "") -> None:
    print(line, flush=True)


def _tenants(args: argparse.Namespace) -> list[str]:
    from db.platform.tenancy import get_tenant, list_tenants
    from domain.people.identity import valid_slug

    if args.tenant:
        return [get_tenant(valid_slug(args.tenant)).slug]
    return [t.slug for t in list_tenants()]


def cmd_evidence_seal(args: argparse.Namespace) -> None:
    from db.evidence.chain import seal_tenant

    for slug in _tenants(args):
        _out(f"{slug}: sealed {seal_tenant(slug):,} fact(s)")


def cmd_evidence_verify(args: argparse.Namespace) -> None:
    from db.evidence.chain import chain_head
    from db.evidence.verify import verify_tenant
    from db.platform.tenancy import tenant_tx
    from tocsin.shell.progress import ProgressLine

    broken = 0
    for slug in _tenants(args):
        with tenant_tx(slug) as tx:
            head = chain_head(tx)
        progress = ProgressLine(f"{slug}: verifying", head.seq, sys.stderr)
        started, cpu = time.perf_counter(), time.process_time()
        try:
            report = verify_tenant(slug, on_progress=progress.update, parts=args.parts)
            progress.update(report.records)
        finally:
            progress.finish()
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
        rate = report.records / seconds if seconds > 0 else 0.0
        per_cpu = report.records / cpu_seconds if cpu_seconds > 0 else 0.0
        summary = (f"{slug}: {report.records:,} chained record(s) to sequence {report.head_seq}, "
                   f"{report.rows:,} row(s) compared, {report.pending:,} pending, "
                   f"{seconds:.2f}s ({rate:,.0f} records/s wall, {per_cpu:,.0f} per CPU-second of "
                   "this process)")
        first = report.first_break
        if first is None:
            _out(f"{summary}: OK")
            continue
        broken += 1
        _out(f"{summary}: BROKEN, {len(report.breaks)} break(s)")
        _out(f"  first broken record: {first.describe()}")
        for other in sorted(report.breaks, key=lambda b: (b.seq is None, b.seq or 0))[1:args.show]:
            _out(f"  also: {other.describe()}")
    if broken:
        sys.exit(EXIT_BROKEN)


def cmd_evidence_key(args: argparse.Namespace) -> None:
    from tocsin.core import runtime
    from tocsin.core.evidence_signing import checkpoint_signer

    signer = checkpoint_signer(runtime.settings())
    _out(f"key id:     {signer.key_id}")
    _out(f"public key: {signer.public_key_hex}  (Ed25519, raw, hex)")
    _out("Checkpoints are signed with it; its private half is derived from SESSION_SECRET and never shown.")
    _out("Give the public key to your inspector: every checkpoint and evidence pack verifies against it.")
    if args.tenant:
        from db.evidence.checkpoints import known_keys
        from db.platform.tenancy import tenant_tx

        with tenant_tx(args.tenant) as tx:
            keys = known_keys(tx)
        if keys:
            _out("Keys that signed checkpoints (rotated keys stay valid for what they signed):")
            for key_id, public, first in keys:
                _out(f"  {key_id}  {public}  first used {first:%Y-%m-%d %H:%M}")


def cmd_evidence_checkpoint(args: argparse.Namespace) -> None:
    from db.evidence.checkpoints import checkpoint_and_keep
    from tocsin.core import runtime

    for slug in _tenants(args):
        checkpoint, copy = checkpoint_and_keep(slug, "manual", runtime.settings())
        _out(f"{slug}: checkpoint {checkpoint.id} signs sequence {checkpoint.seq} "
             f"(head {checkpoint.head_hash[:16]}…) with key {checkpoint.key_id}"
             + (f"; copy written to {copy}" if copy else ""))


def cmd_evidence_export(args: argparse.Namespace) -> None:
    from pathlib import Path

    from db.evidence.pack import PackSelection, build_pack
    from domain.people.identity import parse_date, valid_slug
    from tocsin.core import runtime
    from tocsin.core.evidence_signing import checkpoint_signer

    selection = PackSelection(
        claimed_from=parse_date(args.date_from) if args.date_from else None,
        claimed_to=parse_date(args.date_to) if args.date_to else None,
        client_id=args.client, rule=args.rule or None)
    data, manifest = build_pack(valid_slug(args.tenant), selection, checkpoint_signer(runtime.settings()))
    out = Path(args.out)
    out.write_bytes(data)
    rows = manifest["rows"]
    assert isinstance(rows, dict)
    _out(f"wrote {out} ({len(data):,} bytes): {selection.describe()}; "
         + ", ".join(f"{len(v):,} {k}" for k, v in rows.items()))
    _out(f"verify it with: python verify_pack.py {out.name} --public-key {manifest['public_key']}")


def cmd_evidence_verify_pack(args: argparse.Namespace) -> None:
    from tocsin.shell.evidence_pack_verifier import verify_pack

    problems = verify_pack(args.pack, args.public_key)
    for problem in problems:
        _out(problem)
    if problems:
        _out(f"The pack does NOT verify: {len(problems)} problem(s).")
        sys.exit(EXIT_BROKEN)
    _out("The pack verifies.")


def cmd_evidence_erase_person(args: argparse.Namespace) -> None:
    from db.evidence.erasure import erase_person
    from db.platform.tenancy import tenant_tx
    from domain.people.identity import valid_slug

    with tenant_tx(valid_slug(args.tenant)) as tx:
        erased = erase_person(tx, args.email)
    _out(f"erased user {erased.user_id}: {erased.rows_changed:,} value(s) rewritten in "
         f"{erased.columns_changed} column(s); their salts are deleted, and the chain still verifies")


def add_evidence_commands(sub: argparse._SubParsersAction[Any], command: Command) -> None:
    """Register `tocsin evidence ...` on the top-level subparsers."""
    evidence = sub.add_parser("evidence", help="the tamper-evident evidence chain: seal, verify")
    evidence_sub = evidence.add_subparsers(dest="evidence_command", required=True,
                                           parser_class=type(evidence))
    p = command("seal", cmd_evidence_seal, "seal written facts into each tenant's chain now", evidence_sub)
    p.add_argument("--tenant", help="only this tenant (default: every tenant)")
    p = command("verify", cmd_evidence_verify,
                f"recompute each tenant's chain and compare every chained row; exit {EXIT_BROKEN} "
                "naming the first broken record (sequence, table, id, what differs)", evidence_sub)
    p.add_argument("--tenant", help="only this tenant (default: every tenant)")
    p.add_argument("--show", type=int, default=10, help="breaks listed after the first (default 10)")
    p.add_argument("--parts", type=int, default=0,
                   help="verify in this many processes (for a machine with idle cores; default: one)")
    p = command("key", cmd_evidence_key, "show the public key that signs checkpoints", evidence_sub)
    p.add_argument("--tenant", help="also list every key that signed this tenant's checkpoints")
    p = command("export", cmd_evidence_export,
                "write an evidence pack (ZIP) for a date range, a client or a rule, with a signed checkpoint",
                evidence_sub)
    p.add_argument("--tenant", required=True)
    p.add_argument("--from", dest="date_from", help="claims from this date (YYYY-MM-DD, the tenant's zone)")
    p.add_argument("--to", dest="date_to", help="claims up to this date, inclusive")
    p.add_argument("--client", type=int, help="only this client's claims")
    p.add_argument("--rule", help="only this rule's claims (licence, or rule:<id>)")
    p.add_argument("--out", required=True, help="the ZIP file to write")
    p = command("verify-pack", cmd_evidence_verify_pack, "verify an evidence pack offline; exit "
                f"{EXIT_BROKEN} naming each edited, added or deleted row", evidence_sub)
    p.add_argument("pack")
    p.add_argument("--public-key", help="the published public key (hex) the pack must be signed with")
    p = command("erase-person", cmd_evidence_erase_person,
                "erase a person (GDPR article 17): their address and name, everywhere; the chain "
                "still verifies", evidence_sub)
    p.add_argument("--tenant", required=True)
    p.add_argument("--email", required=True, help="the person's email address")
    p = command("checkpoint", cmd_evidence_checkpoint,
                "sign a checkpoint of each tenant's chain now (written to EVIDENCE_CHECKPOINT_DIR too)",
                evidence_sub)
    p.add_argument("--tenant", help="only this tenant (default: every tenant)")
