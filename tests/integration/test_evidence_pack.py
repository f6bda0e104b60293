"""The evidence pack: exported for a selection, verified by `tocsin evidence verify-pack` and by
its bundled verifier in a fresh virtualenv holding only `cryptography`; an edited, deleted or
added CSV row makes both fail, naming the row."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from actors.email import deliver_email
from db.delivery.inbox import acknowledge
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import add_client, scalar
from tests.integration.conftest import RunningWorker, SesOutbox
from tests.integration.test_cli import run
from tocsin.shell.cli_evidence import EXIT_BROKEN
from tocsin.shell.evidence_pack_verifier import verify_pack

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]
INSTALL_LIMIT = 600  # seconds for pip to install cryptography into the fresh virtualenv


def _pack(tenant: Tenant, worker: RunningWorker, tmp_path: Path,
          capsys: pytest.CaptureFixture[str]) -> Path:
    client, people = add_client(tenant, AS_OF.date() + timedelta(days=7), name="Packed Ltd", users=1)
    add_client(tenant, AS_OF.date() + timedelta(days=8), name="Other Ltd", users=1)
    with tenant_tx(tenant.slug) as tx:
        claim_due_milestones(tx, AS_OF)
        prepare_claims(tx)
    with tenant_tx(tenant.slug) as tx:
        ids = [int(str(r[0])) for r in tx.conn.execute(
            "SELECT id FROM notification_deliveries WHERE channel = 'email'").fetchall()]
    for delivery_id in ids:
        deliver_email.send(tenant.slug, delivery_id)
    worker.drain()
    notice = int(scalar(tenant, "SELECT id FROM notifications WHERE recipient_user_id = %s", people[0].id))
    with tenant_tx(tenant.slug) as tx:
        acknowledge(tx, people[0].id, notice)
    out = tmp_path / "pack.zip"
    code, said, _err = run(capsys, "evidence", "export", "--tenant", tenant.slug,
                           "--client", str(client.id), "--out", str(out))
    assert code == 0, said
    return out


def _rewrite(pack: Path, name: str, edit: object) -> Path:
    """A copy of the pack with one CSV's rows passed through ``edit`` (rows -> rows)."""
    copy = pack.with_name(f"edited-{name}-{pack.name}")
    with zipfile.ZipFile(pack) as source, zipfile.ZipFile(copy, "w") as target:
        for item in source.namelist():
            data = source.read(item)
            if item == name:
                rows = list(csv.reader(io.StringIO(data.decode())))
                out = io.StringIO()
                csv.writer(out, lineterminator="\n").writerows(edit(rows))  # type: ignore[operator]
                data = out.getvalue().encode()
            target.writestr(item, data)
    return copy


def test_a_pack_verifies_and_one_edited_deleted_or_added_row_is_named(
        tenant: Tenant, worker: RunningWorker, ses: SesOutbox, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    pack = _pack(tenant, worker, tmp_path, capsys)
    code, out, _err = run(capsys, "evidence", "verify-pack", str(pack))
    assert (code, out.strip()) == (0, "The pack verifies."), out
    with zipfile.ZipFile(pack) as z:
        claims = list(csv.DictReader(io.StringIO(z.read("claims.csv").decode())))
        assert {"README.md", "verify_pack.py", "manifest.json", "manifest.sig", "chain.jsonl",
                "checkpoint.json", "deliveries.csv", "attempts.csv", "rule_versions.csv"} <= set(z.namelist())
    assert len(claims) == 3  # Packed Ltd's d30, d14 and d7; not Other Ltd's
    assert any(c["acknowledged_at"] for c in claims) and any(c["delivered_at"] for c in claims)
    header = list(claims[0])
    due = header.index("due_on")

    def edit(rows: list[list[str]]) -> list[list[str]]:
        rows[2][due] = "2030-01-01"
        return rows

    edited = _rewrite(pack, "claims.csv", edit)
    code, out, _err = run(capsys, "evidence", "verify-pack", str(edited))
    assert code == EXIT_BROKEN
    ref = claims[1]["ref"]
    assert (f"claims.csv line 3 (notification_ledger {ref}): due_on is '2030-01-01', "
            f"the chain says '{claims[1]['due_on']}'") in out

    deleted = verify_pack(str(_rewrite(pack, "claims.csv", lambda rows: rows[:1] + rows[2:])))
    assert f"claims.csv: notification_ledger {claims[0]['ref']} is in the manifest but not in the file " \
           "(a row was deleted)" in deleted
    forged = _rewrite(pack, "claims.csv", lambda rows: [*rows, ["999999", *rows[1][1:]]])
    added = verify_pack(str(forged))
    assert any("notification_ledger 999999): the chain has no record of this row" in p for p in added)


def test_the_bundled_verifier_runs_in_a_fresh_virtualenv_with_only_cryptography(
        tenant: Tenant, worker: RunningWorker, ses: SesOutbox, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    pack = _pack(tenant, worker, tmp_path, capsys)
    inspector = tmp_path / "inspector"
    inspector.mkdir()
    with zipfile.ZipFile(pack) as z:
        (inspector / "verify_pack.py").write_bytes(z.read("verify_pack.py"))
    (inspector / "pack.zip").write_bytes(pack.read_bytes())
    pin = next(line.strip() for line in (ROOT / "constraints.txt").read_text().splitlines()
               if line.lower().startswith("cryptography=="))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=INSTALL_LIMIT)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", pin],
                   check=True, timeout=INSTALL_LIMIT)
    env = {"PATH": os.pathsep.join([str(venv / "bin"), "/usr/bin", "/bin"]), "HOME": str(tmp_path)}
    installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                               capture_output=True, text=True, env=env, check=True).stdout
    assert "tocsin" not in installed.lower() and "psycopg" not in installed.lower()

    ok = subprocess.run([str(venv / "bin" / "python"), "verify_pack.py", "pack.zip"], cwd=inspector,
                        capture_output=True, text=True, env=env, timeout=60)
    assert (ok.returncode, ok.stdout.strip()) == (0, "The pack verifies."), ok.stdout + ok.stderr

    def edit(rows: list[list[str]]) -> list[list[str]]:
        rows[1][rows[0].index("threshold")] = "d1"
        return rows

    (inspector / "edited.zip").write_bytes(_rewrite(pack, "claims.csv", edit).read_bytes())
    bad = subprocess.run([str(venv / "bin" / "python"), "verify_pack.py", "edited.zip"], cwd=inspector,
                         capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 1
    assert "claims.csv line 2 (notification_ledger" in bad.stdout and "threshold is 'd1'" in bad.stdout
