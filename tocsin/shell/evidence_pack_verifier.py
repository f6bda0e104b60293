"""Verify a Tocsin evidence pack offline: the standard library and `cryptography` only.

    python verify_pack.py pack.zip [--public-key HEX]

This file is copied into every pack as verify_pack.py, and `tocsin evidence verify-pack`
runs the same code. It checks, and names what fails:

1. the manifest's Ed25519 signature (against the public key in the pack, or the one you were
   given with --public-key: compare it with the key the organisation published);
2. each file's SHA-256 against the manifest;
3. the chain segment: every record's hash from its content and its predecessor's, no gap,
   and its last record is the signed checkpoint's sequence and hash (signature checked);
4. each CSV row against the chain's record of that row (its first fact, each later move laid
   over it), field by field; a row listed in the manifest but absent, or present but not
   listed, is named too.

Exit status 0 when everything holds, 1 when something does not (each problem on a line).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import sys
import zipfile
from collections.abc import Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = ["TABLE_KINDS", "main", "verify_pack"]

GENESIS = "0" * 64
# Which chained fact kinds describe the rows of each CSV file, first the row's own record.
TABLE_KINDS = {
    "claims.csv": ("notification_ledger", ("claim", "claim_status", "delivered", "acknowledged")),
    "deliveries.csv": ("notification_deliveries", ("delivery", "delivery_status")),
    "attempts.csv": ("delivery_attempts", ("attempt", "attempt_outcome")),
    "rule_versions.csv": ("rule_versions", ("rule_version",)),
}


def _canonical(fields: dict[str, object]) -> str:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _chain_hash(prev: str, seq: int, kind: str, ref: str, payload: str) -> str:
    return hashlib.sha256(f"{prev}|{seq}|{kind}|{ref}|{payload}".encode()).hexdigest()


def _holds(public_key_hex: str, text: bytes, signature_hex: str) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key_hex)).verify(
            bytes.fromhex(signature_hex), text)
    except (InvalidSignature, ValueError):
        return False
    return True


def _cell(value: object) -> str:
    """A chained value as the CSV files write it (null as an empty cell)."""
    if value is None:
        return ""
    if value is True or value is False:
        return "true" if value else "false"
    return str(value)


def verify_pack(path: str, public_key: str | None = None) -> list[str]:
    """Every problem found in the pack at ``path`` (none: it verifies)."""
    problems: list[str] = []
    with zipfile.ZipFile(path) as pack:
        names = set(pack.namelist())
        for needed in ("manifest.json", "manifest.sig", "chain.jsonl", "checkpoint.json"):
            if needed not in names:
                return [f"{needed} is missing from the pack"]
        manifest_bytes = pack.read("manifest.json")
        manifest = json.loads(manifest_bytes)
        key = public_key or manifest["public_key"]
        if public_key and public_key != manifest["public_key"]:
            problems.append("the pack was signed with another key than the one given")
        if not _holds(key, manifest_bytes, pack.read("manifest.sig").decode().strip()):
            problems.append("manifest.json: its signature does not verify (the manifest was edited)")
        for name, digest in sorted(manifest["files"].items()):
            if name not in names:
                problems.append(f"{name}: listed in the manifest, missing from the pack")
            elif hashlib.sha256(pack.read(name)).hexdigest() != digest:
                problems.append(f"{name}: its SHA-256 differs from the manifest's (the file was changed)")
        views = _chain_views(pack, manifest, key, problems)
        for file_name, (table, _kinds) in TABLE_KINDS.items():
            if file_name in names:
                _compare_rows(pack, file_name, table, manifest["rows"].get(table, []), views, problems)
    return problems


def _chain_views(pack: zipfile.ZipFile, manifest: dict[str, object], key: str,
                 problems: list[str]) -> dict[tuple[str, str], dict[str, object]]:
    kind_table = {k: t for t, kinds in TABLE_KINDS.values() for k in kinds}
    checkpoint = json.loads(pack.read("checkpoint.json"))
    if not _holds(key, checkpoint["signed_text"].encode(), checkpoint["signature"]):
        problems.append("checkpoint.json: its signature does not verify")
    signed = json.loads(checkpoint["signed_text"])
    views: dict[tuple[str, str], dict[str, object]] = {}
    expected_seq, prev = None, None
    last = (0, GENESIS)
    for line_no, line in enumerate(pack.read("chain.jsonl").decode().splitlines(), start=1):
        r = json.loads(line)
        seq, kind, ref, payload = int(r["seq"]), str(r["kind"]), str(r["ref"]), str(r["payload"])
        if expected_seq is not None and seq != expected_seq:
            problems.append(f"chain.jsonl line {line_no}: sequence {seq} where {expected_seq} was due")
        if prev is not None and r["prev_hash"] != prev:
            problems.append(f"chain.jsonl line {line_no} (sequence {seq}): its previous hash is not the "
                            "hash of the record before it")
        if _chain_hash(r["prev_hash"], seq, kind, ref, payload) != r["hash"]:
            problems.append(f"chain.jsonl line {line_no} (sequence {seq}): its hash does not match "
                            "its content")
        expected_seq, prev, last = seq + 1, r["hash"], (seq, r["hash"])
        table = kind_table.get(kind)
        if table is not None:
            views.setdefault((table, ref), {}).update(json.loads(payload))
    if last != (signed["seq"], signed["head_hash"]):
        problems.append(f"chain.jsonl: it ends at sequence {last[0]} with hash {last[1][:16]}…, the signed "
                        f"checkpoint names sequence {signed['seq']} with hash {signed['head_hash'][:16]}…")
    return views


def _compare_rows(pack: zipfile.ZipFile, file_name: str, table: str, listed: Sequence[str],
                  views: dict[tuple[str, str], dict[str, object]], problems: list[str]) -> None:
    rows = list(csv.DictReader(io.StringIO(pack.read(file_name).decode("utf-8"))))
    seen = set()
    for line_no, row in enumerate(rows, start=2):  # line 1 is the header
        ref = row.get("ref", "")
        seen.add(ref)
        view = views.get((table, ref))
        if view is None:
            problems.append(f"{file_name} line {line_no} ({table} {ref}): the chain has no record "
                            "of this row (a row was added)")
            continue
        for name, value in row.items():
            if name == "ref" or name not in view:
                continue
            if _cell(view[name]) != value:
                problems.append(f"{file_name} line {line_no} ({table} {ref}): {name} is {value!r}, "
                                f"the chain says {_cell(view[name])!r}")
                break
    for ref in listed:
        if ref not in seen:
            problems.append(f"{file_name}: {table} {ref} is in the manifest but not in the file "
                            "(a row was deleted)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Verify a Tocsin evidence pack offline.")
    parser.add_argument("pack", help="the pack's ZIP file")
    parser.add_argument("--public-key", help="the organisation's published public key (hex)")
    args = parser.parse_args(argv)
    problems = verify_pack(args.pack, args.public_key)
    for problem in problems:
        print(problem)
    print("The pack verifies." if not problems else f"The pack does NOT verify: {len(problems)} problem(s).")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
