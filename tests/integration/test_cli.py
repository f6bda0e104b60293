"""The `tocsin` command: each command works, and bad input prints one clear line on
stderr, exits 2 and writes nothing."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from db.platform.pool import connection
from db.platform.tenancy import Tenant
from tests.integration.builders import add_client, ledger
from tocsin.boot.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        main(list(argv))
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def footprint(tenant: Tenant | None = None) -> tuple[int, ...]:
    """Row counts that any accidental write would change."""
    with connection() as conn:
        counts = [conn.execute("SELECT count(*) FROM control.tenants").fetchone()[0],  # type: ignore[index]
                  conn.execute("SELECT count(*) FROM control.schema_migrations").fetchone()[0],  # type: ignore[index]
                  conn.execute("SELECT count(*) FROM pg_namespace").fetchone()[0]]  # type: ignore[index]
        if tenant is not None:
            for table in ("clients", "users", "license_events", "notification_ledger"):
                counts.append(conn.execute(
                    f"SELECT count(*) FROM {tenant.schema}.{table}").fetchone()[0])  # type: ignore[index]
    return tuple(int(str(c)) for c in counts)


def assert_refused(capsys: pytest.CaptureFixture[str], tenant: Tenant | None, fragment: str,
                   *argv: str) -> None:
    before = footprint(tenant)
    code, out, err = run(capsys, *argv)
    assert code == 2, (argv, out, err)
    assert err.count("\n") == 1 and err.startswith("tocsin: error: "), err
    assert fragment in err, err
    assert footprint(tenant) == before


def test_tenant_create_and_list(capsys: pytest.CaptureFixture[str]) -> None:
    slug = f"cli-{uuid.uuid4().hex[:8]}"
    code, out, _ = run(capsys, "tenant", "create", slug, "--name", "CLI Co", "--tz", "Asia/Tokyo")
    assert code == 0 and f"created tenant {slug}" in out
    try:
        code, out, _ = run(capsys, "tenant", "list")
        assert code == 0 and slug in out and "Asia/Tokyo" in out
        assert_refused(capsys, None, "exists already",
                       "tenant", "create", slug, "--name", "Again", "--tz", "UTC")
    finally:
        from db.platform.tenancy import get_tenant
        from tests.integration.conftest import remove_tenant

        remove_tenant(get_tenant(slug))


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["tenant", "create", "Bad_Slug", "--name", "X", "--tz", "UTC"], "invalid tenant slug"),
        (["tenant", "create", "good-slug", "--name", "X", "--tz", "Mars/Base"], "unknown time zone"),
        (["tenant", "create", "good-slug", "--name", "  ", "--tz", "UTC"], "must not be empty"),
        (["tenant", "create", "good-slug", "--tz", "UTC"], "--name"),
        (["tenant", "list", "--bogus"], "unrecognized arguments"),
        (["tenant", "remove", "x"], "invalid choice"),
        (["migrate", "--now"], "unrecognized arguments"),
        (["seed-demo", "extra"], "unrecognized arguments"),
        (["frobnicate"], "invalid choice"),
        (["up", "--detach"], "unrecognized arguments"),
        (["web", "extra"], "unrecognized arguments"),
        (["worker", "--processes", "none"], "invalid positive_count value"),
        (["worker", "--threads", "0"], "invalid positive_count value"),
        (["clock", "--every", "5"], "unrecognized arguments"),
    ],
)
def test_bad_tenant_and_global_input_is_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    assert_refused(capsys, None, fragment, *argv)


def test_bad_client_input_is_refused(capsys: pytest.CaptureFixture[str], tenant: Tenant) -> None:
    ok = ["--tenant", tenant.slug, "--name", "Acme"]
    cases = [
        (["client", "create", "--tenant", "nope-nope", "--name", "A", "--expires", "2027-01-01"],
         "unknown tenant"),
        (["client", "create", "--tenant", "BAD", "--name", "A", "--expires", "2027-01-01"],
         "invalid tenant slug"),
        (["client", "create", *ok, "--expires", "2027-02-30"], "malformed date"),
        (["client", "create", *ok, "--expires", "01/02/2027"], "malformed date"),
        (["client", "create", *ok, "--expires", "2027-01-01", "--plan", "gold"], "unknown plan"),
        (["client", "create", *ok, "--expires", "2027-01-01", "--tz", "Nowhere/City"],
         "unknown time zone"),
        (["client", "create", "--tenant", tenant.slug, "--name", "", "--expires", "2027-01-01"],
         "must not be empty"),
    ]
    for argv, fragment in cases:
        assert_refused(capsys, tenant, fragment, *argv)
    code, out, _ = run(capsys, "client", "create", *ok, "--expires", "2027-01-01",
                       "--plan", "enterprise", "--tz", "Europe/Paris")
    assert code == 0 and "enterprise" in out and "2027-01-01" in out


def test_bad_user_input_is_refused(capsys: pytest.CaptureFixture[str], tenant: Tenant) -> None:
    client, _ = add_client(tenant, datetime.now(UTC).date() + timedelta(days=100), users=0)
    base = ["user", "create", "--tenant", tenant.slug]
    cases = [
        (["user", "create", "--tenant", "nope-nope", "--email", "a@b.example", "--role", "admin"],
         "unknown tenant"),
        ([*base, "--email", "not-an-email", "--role", "admin"], "invalid email"),
        ([*base, "--email", "a@b.example", "--role", "owner"], "unknown role"),
        ([*base, "--email", "a@b.example", "--role", "client_user"], "needs --client"),
        ([*base, "--email", "a@b.example", "--role", "client_user", "--client", "999999"],
         "no client with id"),
        ([*base, "--email", "a@b.example", "--role", "admin", "--client", str(client.id)],
         "only client_user"),
        ([*base, "--email", "a@b.example", "--role", "admin", "--password", "short"],
         "at least 8"),
        ([*base, "--email", "a@b.example", "--role", "admin", "--client", "x"], "invalid int"),
    ]
    for argv, fragment in cases:
        assert_refused(capsys, tenant, fragment, *argv)
    code, out, _ = run(capsys, *base, "--email", "a@b.example", "--role", "client_user",
                       "--client", str(client.id))
    assert code == 0 and "password: " in out
    assert_refused(capsys, tenant, "exists already",
                   *base, "--email", "A@B.example", "--role", "admin", "--password", "longenough")


def test_scan_and_ledger_commands(capsys: pytest.CaptureFixture[str], tenant: Tenant) -> None:
    as_of = datetime(2027, 6, 1, 9, 0, tzinfo=UTC)
    client, _ = add_client(tenant, as_of.date() + timedelta(days=7), name="Ledger Ltd", users=0)
    for argv, fragment in [
        (["scan", "--tenant", "nope-nope"], "unknown tenant"),
        (["scan", "--tenant", tenant.slug, "--as-of", "2027-06-01T09:00:00"], "no UTC offset"),
        (["scan", "--tenant", tenant.slug, "--as-of", "June 1st"], "malformed instant"),
        (["ledger", "--tenant", "nope-nope"], "unknown tenant"),
        (["ledger", "--tenant", "Not A Slug"], "invalid tenant slug"),
        (["ledger"], "--tenant"),
    ]:
        assert_refused(capsys, tenant, fragment, *argv)

    code, out, _ = run(capsys, "scan", "--tenant", tenant.slug, "--as-of", as_of.isoformat())
    assert code == 0 and "claimed 1, skipped 2" in out
    assert {(r["subject_id"], r["threshold"]) for r in ledger(tenant)} == {
        (client.id, "d30"), (client.id, "d14"), (client.id, "d7")}

    code, out, _ = run(capsys, "ledger", "--tenant", tenant.slug)
    assert code == 0 and "Ledger Ltd" in out and "claimed" in out and "skipped" in out
    code, out, _ = run(capsys, "ledger", "--tenant", tenant.slug, "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["threshold"], r["status"]) for r in rows] == [
        ("d14", "skipped"), ("d30", "skipped"), ("d7", "claimed")]
    assert rows[2]["due_on"] == (as_of.date() + timedelta(days=7)).isoformat()


def test_the_console_script_is_installed_and_maps_errors_to_exit_codes() -> None:
    tocsin = os.path.join(os.path.dirname(sys.executable), "tocsin")
    done = subprocess.run([tocsin, "ledger", "--tenant", "no-such-tenant"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == "tocsin: error: unknown tenant 'no-such-tenant'\n"
    env = {**os.environ, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    done = subprocess.run([tocsin, "tenant", "list"], capture_output=True, text=True, timeout=60,
                          env=env)
    assert done.returncode == 1
    assert done.stderr.startswith("tocsin: error: cannot reach PostgreSQL")
    assert done.stderr.count("\n") == 1
