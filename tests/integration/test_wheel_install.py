"""Tocsin installed as an operator installs it: the wheel built from this checkout, installed
with constraints.txt into a new virtualenv outside the checkout, run from a folder that is
not the checkout. The portal it serves must find its templates, CSS and htmx in that
virtualenv; nothing may be imported from the checkout."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tomllib
import urllib.parse
import urllib.request
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.integration.conftest import wait_until
from tests.support import rabbitmq
from tocsin.shell.services import free_port

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
SHIPPED = PACKAGES["find"]["include"]
TOP_LEVEL = sorted({name.split(".")[0] for name in SHIPPED})
INSTALL_LIMIT = 600  # seconds to build the wheel, or to install it (pip's cache: about a minute)
WEB_LIMIT = 60.0  # seconds for the installed portal to answer its first request
UP_LIMIT = 120.0  # seconds for the installed `tocsin up` to start web, worker and clock
STATIC_FILES = {"tocsin.css": "text/css", "htmx.min.js": "javascript", "htmx-ext-sse.js": "javascript"}
ON_EVERY_PAGE = ("tocsin.css", "htmx.min.js")  # base.html links them; the SSE extension is the inbox's


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    elsewhere: Path  # a working folder that is not the checkout

    def command(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def env(self, **overrides: str) -> dict[str, str]:
        # Nothing may lead the new interpreter back to the checkout or to the suite's virtualenv.
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
        env["PATH"] = os.pathsep.join([str(self.venv / "bin"), "/usr/bin", "/bin"])
        return env | overrides


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: float = INSTALL_LIMIT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _checked(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{result.args} exited {result.returncode}:\n{output}"
    return result


def _source_files() -> set[str]:
    """Every file of the shipped packages in the checkout, as the wheel would name it."""
    return {
        path.relative_to(ROOT).as_posix()
        for name in TOP_LEVEL
        for path in (ROOT / name).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    assert not base.is_relative_to(ROOT)
    # Build from a copy holding only what the build reads: a build inside the checkout would
    # leave build/ behind, and a file the copy lacks would be one the wheel cannot have either.
    source = base / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in TOP_LEVEL:
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    dist = base / "dist"
    _checked(_run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                   "--wheel-dir", str(dist), str(source)], cwd=base))
    (wheel,) = dist.glob("tocsin-*.whl")

    venv = base / "venv"
    _checked(_run([sys.executable, "-m", "venv", str(venv)], cwd=base))
    # --no-compile: byte-compiling every dependency's modules up front costs half the install.
    _checked(_run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile",
                   "-c", str(ROOT / "constraints.txt"), str(wheel)], cwd=base))
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    return Installed(wheel, venv, elsewhere)


def test_the_wheel_holds_every_file_of_the_shipped_packages(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = {name for name in wheel.namelist() if ".dist-info/" not in name}
    assert names == _source_files()
    assert {"static/htmx.min.js", "static/tocsin.css", "portal/templates/login.html",
            "db/platform/migrations/control/0001_control.sql", "tocsin/Procfile"} <= names


def test_the_installed_command_and_modules_come_from_the_new_virtualenv(installed: Installed) -> None:
    help_text = _checked(_run([installed.command("tocsin"), "--help"], installed.elsewhere,
                              installed.env())).stdout
    assert "migrate" in help_text and "web" in help_text and "up" in help_text

    probe = (
        "import json, actors, db, domain, portal, portal.app, portal.templating, tocsin\n"
        "from db.platform.migrations import CONTROL, TENANT\n"
        "from tocsin.shell.processes import _procfile\n"
        "print(json.dumps({'modules': [m.__file__ for m in (actors, db, domain, portal, tocsin)],\n"
        "  'static': str(portal.app.STATIC), 'templates': str(portal.templating.TEMPLATES),\n"
        "  'procfile': str(_procfile()), 'migrations': len(CONTROL) + len(TENANT)}))\n"
    )
    found = json.loads(_checked(_run([installed.command("python"), "-c", probe], installed.elsewhere,
                                     installed.env())).stdout)
    venv = installed.venv.resolve()
    paths = [Path(p).resolve() for p in [*found["modules"], found["static"], found["templates"],
                                          found["procfile"]]]
    assert [p for p in paths if not p.is_relative_to(venv)] == []
    assert Path(found["procfile"]).read_text() == (ROOT / "Procfile").read_text()
    assert found["migrations"] == len(list((ROOT / "db" / "platform" / "migrations").rglob("*.sql")))


def test_tocsin_up_without_the_embedded_extra_says_what_to_set_or_install(installed: Installed) -> None:
    env = {k: v for k, v in installed.env().items()
           if k not in ("DATABASE_URL", "REDIS_URL", "SES_ENDPOINT_URL")}
    result = _run([installed.command("tocsin"), "up", "--no-demo"], installed.elsewhere,
                  env | {"TOCSIN_HOME": str(installed.elsewhere / "state")}, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "DATABASE_URL is not set" in result.stderr
    assert "pip install 'tocsin[embedded]'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture
def own_queues() -> Iterator[dict[str, str]]:
    """Queues of its own (a namespace, and a vhost on RabbitMQ): nothing the installed
    processes enqueue reaches the suite's queues, and nothing the suite left in them reaches
    the installed worker (which runs on a database of its own)."""
    with rabbitmq.own_queues("tocsin-wheel") as env:
        yield env


@pytest.fixture
def installed_web(installed: Installed, own_queues: dict[str, str]) -> Iterator[str]:
    port = free_port()
    env = installed.env(PORT=str(port), WEB_HOST="127.0.0.1", PYTHONUNBUFFERED="1", **own_queues)
    env.setdefault("SESSION_SECRET", secrets.token_urlsafe(48))
    log = (installed.elsewhere / "web.log").open("w+")
    process = subprocess.Popen([installed.command("tocsin"), "web"], cwd=installed.elsewhere, env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        log.close()


def _get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.headers.get("Content-Type", ""), response.read()


def _answers(url: str) -> bool:
    try:
        return _get(url)[0] == 200
    except OSError:
        return False


def test_the_installed_portal_serves_its_login_page_css_and_htmx_outside_the_checkout(
    installed_web: str,
) -> None:
    wait_until(lambda: _answers(f"{installed_web}/login"), "the installed portal's login page", WEB_LIMIT)
    status, content_type, body = _get(f"{installed_web}/login")
    page = body.decode()
    assert status == 200 and content_type.startswith("text/html")
    assert "Sign in" in page
    assert [name for name in ON_EVERY_PAGE if f"/static/{name}" not in page] == []
    for name, expected_type in STATIC_FILES.items():
        status, content_type, body = _get(f"{installed_web}/static/{name}")
        assert status == 200 and expected_type in content_type, (name, status, content_type)
        assert body == (ROOT / "static" / name).read_bytes(), name


@pytest.fixture
def own_database() -> Iterator[str]:
    """A database of its own on the suite's server: the installed processes' scans and sweeps
    must not touch the suite's tenants."""
    name = f"tocsin_wheel_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = urllib.parse.urlsplit(os.environ["DATABASE_URL"])
    try:
        yield urllib.parse.urlunsplit(url._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_tocsin_up_from_the_installed_package_runs_web_worker_and_clock_from_its_own_procfile(
    installed: Installed, own_database: str, own_queues: dict[str, str]
) -> None:
    port = free_port()
    env = installed.env(DATABASE_URL=own_database, PORT=str(port), WEB_HOST="127.0.0.1",
                        PORTAL_URL=f"http://127.0.0.1:{port}", PYTHONUNBUFFERED="1", **own_queues,
                        TOCSIN_HOME=str(installed.elsewhere / "up-state"),
                        WORKER_PROCESSES="1", WORKER_THREADS="1")
    env.setdefault("SESSION_SECRET", secrets.token_urlsafe(48))
    assert not (installed.elsewhere / "Procfile").exists()
    with (installed.elsewhere / "up.log").open("w+") as log:
        # Its own session, so that Ctrl-C reaches the whole group, as a terminal sends it.
        process = subprocess.Popen([installed.command("tocsin"), "up", "--no-demo"],
                                   cwd=installed.elsewhere, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)

        def output() -> str:
            log.flush()
            log.seek(0)
            return log.read()

        try:
            for line in ("web.1", "Worker process is ready for action", "tick enqueued"):
                wait_until(lambda line=line: line in output(), f"{line!r} from tocsin up", UP_LIMIT)
            wait_until(lambda: _answers(f"http://127.0.0.1:{port}/login"), "the login page", WEB_LIMIT)
            status, _, body = _get(f"http://127.0.0.1:{port}/static/tocsin.css")
            assert status == 200 and body == (ROOT / "static" / "tocsin.css").read_bytes()
            os.killpg(process.pid, signal.SIGINT)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        everything = output()
    assert "migrations:" in everything and "Stopped." in everything
    assert "Traceback" not in everything, everything
