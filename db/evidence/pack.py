"""The evidence pack: a ZIP an inspector verifies offline. For a date range, a client or a
rule: CSVs of the claims (with their delivery and acknowledgement), deliveries, attempts and
the rule versions used; the chain segment that records them, up to a checkpoint signed for
this export; a manifest of every file's SHA-256, signed; a README; and the standalone verifier
(tocsin/shell/evidence_pack_verifier.py: the standard library and `cryptography` only).

Everything is read in one REPEATABLE READ transaction that first seals what is pending and
holds the chain's head, so the files, the chain segment and the checkpoint agree exactly.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from importlib import resources

import psycopg

from db.evidence.audit import record_audit_alone
from db.evidence.checkpoint_emails import queue_checkpoint_email
from db.evidence.verify import SOURCES, Source, source_rows
from db.people.clients import get_client
from db.platform.effects import SendCheckpointEmails, carry_out
from db.platform.pool import connection
from db.platform.tenancy import TenantTx, get_tenant, tenant_tx
from db.rules.definitions import get_rule
from domain.errors import InvalidInput, NotFound
from domain.evidence.canonical import canonical_payload, checkpoint_text
from domain.evidence.verification import ERASED, FACT_KINDS
from tocsin.core.clock import utcnow
from tocsin.core.evidence_signing import CheckpointSigner

__all__ = ["PACK_FILES", "PackSelection", "build_pack", "check_selection"]

PACK_FILES = {  # file -> the chained table it lists
    "claims.csv": "notification_ledger", "deliveries.csv": "notification_deliveries",
    "attempts.csv": "delivery_attempts", "rule_versions.csv": "rule_versions",
}
SERIALIZATION_RETRIES = 3  # a sealer that moved the head after our snapshot: read again


@dataclass(frozen=True)
class PackSelection:
    """Which claims the pack covers; the rest follows from them."""

    claimed_from: date | None = None
    claimed_to: date | None = None  # inclusive
    client_id: int | None = None
    rule: str | None = None

    def describe(self) -> str:
        parts = [f"claimed from {self.claimed_from}" if self.claimed_from else "",
                 f"claimed to {self.claimed_to}" if self.claimed_to else "",
                 f"client {self.client_id}" if self.client_id is not None else "",
                 f"rule {self.rule}" if self.rule else ""]
        return ", ".join(p for p in parts if p) or "every claim"


def check_selection(tx: TenantTx, selection: PackSelection) -> None:
    """Refuse a selection that cannot be meant: a range that ends before it starts
    (InvalidInput), a client or a rule this organisation does not have (NotFound: another
    organisation's ids are not told apart from ids that never existed)."""
    if (selection.claimed_from and selection.claimed_to
            and selection.claimed_from > selection.claimed_to):
        raise InvalidInput(f"the range ends ({selection.claimed_to}) before it starts "
                           f"({selection.claimed_from}): put the earlier date in \"from\"")
    if selection.client_id is not None:
        get_client(tx, selection.client_id)
    if selection.rule is not None and selection.rule != "licence":
        number = selection.rule.removeprefix("rule:")
        if not (selection.rule.startswith("rule:") and number.isdigit() and len(number) <= 18):
            raise NotFound(f"no rule {selection.rule!r}: name licence, or rule:<id>")
        get_rule(tx, int(number))


_SELECTED = """
    SELECT l.id FROM notification_ledger l, control.tenants t
    WHERE t.slug = %(slug)s
      AND (%(from)s::date IS NULL OR (l.claimed_at AT TIME ZONE t.time_zone)::date >= %(from)s)
      AND (%(to)s::date IS NULL OR (l.claimed_at AT TIME ZONE t.time_zone)::date <= %(to)s)
      AND (%(client)s::bigint IS NULL OR (l.subject_kind = 'client' AND l.subject_id = %(client)s))
      AND (%(rule)s::text IS NULL OR l.rule = %(rule)s)
"""


def _refs(conn: psycopg.Connection[tuple[object, ...]], slug: str,
          selection: PackSelection) -> dict[str, set[str]]:
    claims = [int(str(r[0])) for r in conn.execute(_SELECTED, {
        "slug": slug, "from": selection.claimed_from, "to": selection.claimed_to,
        "client": selection.client_id, "rule": selection.rule}).fetchall()]
    deliveries = [int(str(r[0])) for r in conn.execute(
        "SELECT d.id FROM notification_deliveries d JOIN notifications n ON n.id = d.notification_id "
        "WHERE n.ledger_id = ANY(%s)", [claims]).fetchall()]
    attempts = [str(r[0]) for r in conn.execute(
        "SELECT id FROM delivery_attempts WHERE delivery_id = ANY(%s)", [deliveries]).fetchall()]
    versions = [str(r[0]) for r in conn.execute(
        "SELECT DISTINCT rule_id || '/' || rule_version FROM notification_ledger "
        "WHERE id = ANY(%s) AND rule_id IS NOT NULL", [claims]).fetchall()]
    return {"notification_ledger": {str(c) for c in claims},
            "notification_deliveries": {str(d) for d in deliveries},
            "delivery_attempts": set(attempts), "rule_versions": set(versions)}


def _csv(source: Source, rows: Iterable[tuple[str, dict[str, object]]]) -> bytes:
    out = io.StringIO()
    writer: csv.writer | None = None  # type: ignore[valid-type]
    for ref, values in rows:
        if writer is None:
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(["ref", *values])
        writer.writerow([ref, *("erased" if v is ERASED else _cell(v) for v in values.values())])
    if writer is None:
        out.write("ref\n")
    return out.getvalue().encode()


def _cell(value: object) -> str:
    if value is None:
        return ""
    if value is True or value is False:
        return "true" if value else "false"
    return str(value)


def build_pack(slug: str, selection: PackSelection,
               signer: CheckpointSigner) -> tuple[bytes, dict[str, object]]:
    """The pack's bytes and its manifest. Signs (and keeps) an export checkpoint."""
    tenant = get_tenant(slug)
    with tenant_tx(tenant.slug) as tx:
        check_selection(tx, selection)
    for attempt in range(SERIALIZATION_RETRIES):
        try:
            built = _build(tenant.slug, tenant.schema, selection, signer)
            record_audit_alone(tenant.slug, "export.evidence_pack", "evidence_pack", None,
                               after={"selection": selection.describe(), "bytes": len(built[0])})
            return built
        except psycopg.errors.SerializationFailure:
            if attempt == SERIALIZATION_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def _build(slug: str, schema: str, selection: PackSelection,
           signer: CheckpointSigner) -> tuple[bytes, dict[str, object]]:
    with connection() as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT set_config('search_path', %s, true)", [f"{schema}, public"])
        conn.execute("SELECT evidence_seal(1000000000)")  # holds the head until this commits
        head = conn.execute("SELECT seq, hash FROM evidence_head").fetchone()
        assert head is not None
        seq, head_hash = int(str(head[0])), str(head[1])
        refs = _refs(conn, slug, selection)
        if not refs["notification_ledger"]:
            raise InvalidInput(f"no claim matches ({selection.describe()}): the pack would be empty")
        files: dict[str, bytes] = {}
        for source in SOURCES:
            name = next((f for f, t in PACK_FILES.items() if t == source.table), None)
            if name is not None:
                wanted = refs[source.table]
                files[name] = _csv(source, ((r, v) for r, v in source_rows(conn, source) if r in wanted))
        kinds = [k.name for k in FACT_KINDS.values() if k.table in refs]
        first = conn.execute(
            "SELECT min(seq) FROM evidence_chain WHERE kind = ANY(%s) AND ref = ANY(%s)",
            [kinds, sorted(set().union(*refs.values()))]).fetchone()
        start = int(str(first[0])) if first and first[0] is not None else seq
        segment = conn.execute(
            "SELECT seq, kind, ref, payload, prev_hash, hash FROM evidence_chain "
            "WHERE seq BETWEEN %s AND %s ORDER BY seq", [start, seq]).fetchall()
        files["chain.jsonl"] = "".join(
            json.dumps({"seq": r[0], "kind": r[1], "ref": r[2], "payload": r[3], "prev_hash": r[4],
                        "hash": r[5]}, sort_keys=True, ensure_ascii=False) + "\n" for r in segment).encode()
        signed_at = utcnow()
        text = checkpoint_text(slug, seq, head_hash, signed_at, signer.key_id)
        signature = signer.sign(text)
        conn.execute("INSERT INTO control.evidence_keys (key_id, public_key) VALUES (%s, %s) "
                     "ON CONFLICT DO NOTHING", [signer.key_id, signer.public_key_hex])
        kept = conn.execute("INSERT INTO evidence_checkpoints (seq, head_hash, signed_at, reason, key_id, "
                            "signature) VALUES (%s, %s, %s, 'export', %s, %s) RETURNING id",
                            [seq, head_hash, signed_at, signer.key_id, signature]).fetchone()
        assert kept is not None
        checkpoint_id = int(str(kept[0]))
        emailed = queue_checkpoint_email(conn, checkpoint_id)  # a copy to the compliance address
        files["checkpoint.json"] = json.dumps({
            "tenant": slug, "seq": seq, "head_hash": head_hash, "key_id": signer.key_id,
            "public_key": signer.public_key_hex, "signed_text": text, "signature": signature},
            sort_keys=True, indent=2).encode()
        files["README.md"] = _readme(slug, selection, signer, seq).encode()
        files["verify_pack.py"] = resources.files("tocsin.shell").joinpath(
            "evidence_pack_verifier.py").read_bytes()
    if emailed:  # committed: hand it to the sender (the clock's next verification would too)
        carry_out(slug, [SendCheckpointEmails([checkpoint_id])])
    manifest: dict[str, object] = {
        "tenant": slug, "selection": selection.describe(), "created_at": json.loads(
            canonical_payload({"t": signed_at}))["t"], "chain": {"from": start, "to": seq},
        "public_key": signer.public_key_hex, "key_id": signer.key_id,
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
        "rows": {table: sorted(refs[table], key=_ref_order) for table in PACK_FILES.values()},
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, indent=2).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as pack:
        for name, data in sorted(files.items()):
            pack.writestr(name, data)
        pack.writestr("manifest.json", manifest_bytes)
        pack.writestr("manifest.sig", signer.sign(manifest_bytes.decode()) + "\n")
    return buffer.getvalue(), manifest


def _ref_order(ref: str) -> tuple[int, ...]:
    return tuple(int(p) for p in ref.split("/"))


def _readme(slug: str, selection: PackSelection, signer: CheckpointSigner, seq: int) -> str:
    return f"""# Evidence pack of {slug}

Selection: {selection.describe()}. Chain records up to sequence {seq}.

## What is in it

- `claims.csv`: each claim (notification_ledger) with when it was claimed, delivered and
  acknowledged and by whom (a user id); `deliveries.csv`: each delivery of those claims,
  per channel, with its status; `attempts.csv`: every attempt and its outcome;
  `rule_versions.csv`: the rule versions that fired (the SHA-256 of each definition; who saved it
  as a salted digest). Times are UTC; an empty cell is no value.
- `chain.jsonl`: the segment of the organisation's hash chain that records these rows, one
  record per line: `hash = sha256(prev_hash|seq|kind|ref|payload)`, the payload canonical JSON.
- `checkpoint.json`: the chain's head at this export, signed with Ed25519.
- `manifest.json`: every file's SHA-256 and the rows the pack lists; `manifest.sig`: its
  Ed25519 signature.
- `verify_pack.py`: the verifier (Python 3.11+, the standard library and `cryptography`).

## How to verify

    python -m venv venv && venv/bin/pip install cryptography
    venv/bin/python verify_pack.py pack.zip --public-key {signer.public_key_hex}

Compare the public key with the one the organisation published (its evidence page, or
`tocsin evidence key`): key id {signer.key_id}. The verifier checks the signatures, each file's
hash, every chain record's hash and link, and each CSV row against the chain's record of it,
and names any row that was edited, added or deleted.
"""
