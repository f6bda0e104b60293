"""Dependencies point one way. `make lint` runs import-linter's contracts (pyproject.toml,
[tool.importlinter]); this test reads the same layers and checks every import of every
product module against them by walking its syntax tree, imports inside functions included,
so a lazy import cannot hide a dependency that points the wrong way."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
(LAYERS,) = [c["layers"] for c in CONFIG["contracts"] if c["type"] == "layers"]
(PURE,) = [c for c in CONFIG["contracts"] if c["type"] == "forbidden"]


def _layer_of(module: str) -> tuple[int, str] | None:
    """(layer index from the top, the sibling package) of ``module``, or None outside the layers."""
    for index, layer in enumerate(LAYERS):
        for package in (p.strip() for p in layer.split("|")):
            if module == package or module.startswith(package + "."):
                return index, package
    return None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, source: str | None = None) -> list[tuple[int, str, bool]]:
    """(line, imported module, inside a function) for every import statement of ``path``
    (or of ``source``, read as if it were that file)."""
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    nested: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            nested.update(id(inner) for inner in ast.walk(node) if inner is not node)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, id(node) in nested) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module, id(node) in nested)]
            # `from package import module` imports the module too
            found += [(node.lineno, f"{node.module}.{alias.name}", id(node) in nested) for alias in node.names
                      if (ROOT / Path(*node.module.split("."), alias.name)).with_suffix(".py").exists()
                      or (ROOT / Path(*node.module.split("."), alias.name, "__init__.py")).exists()]
    return found


def _violations(path: Path, source: str | None = None) -> list[str]:
    importer = _module_name(path)
    mine = _layer_of(importer)
    problems = []
    for line, imported, inside in _imports(path, source):
        theirs = _layer_of(imported)
        where = f"{path.relative_to(ROOT)}:{line}{' (inside a function)' if inside else ''}"
        if importer.split(".")[0] == "domain":
            if any(imported == f or imported.startswith(f + ".") for f in PURE["forbidden_modules"]):
                problems.append(f"{where}: domain imports {imported}")
            continue
        if mine is None or theirs is None:
            continue
        if theirs[0] < mine[0]:
            problems.append(f"{where}: {importer} (layer {mine[1]}) imports {imported}, a layer above it")
        elif theirs[0] == mine[0] and theirs[1] != mine[1]:
            problems.append(f"{where}: {importer} imports its sibling {imported}")
    return problems


def _product_files() -> list[Path]:
    return sorted(p for package in CONFIG["root_packages"] for p in (ROOT / package).rglob("*.py"))


def test_every_import_of_the_product_points_down_the_layers() -> None:
    problems = [problem for path in _product_files() for problem in _violations(path)]
    assert problems == []


def test_an_import_inside_a_function_is_seen() -> None:
    # Never written into db/: the other tests (other xdist workers) walk the source tree.
    sample = ROOT / "db" / "_layer_sample.py"
    source = "def later():\n    from actors.email import deliver_email\n    return deliver_email\n"
    assert _violations(sample, source) == [
        "db/_layer_sample.py:2 (inside a function): db._layer_sample (layer db) imports "
        "actors.email, a layer above it"]


def test_import_linter_sees_imports_inside_functions_too() -> None:
    """grimp (import-linter's graph) records imports made inside functions: the shell's
    `_chosen_tenants` imports db.platform.tenancy only when it runs."""
    graph = grimp.build_graph("tocsin", "db", cache_dir=None)
    details = graph.get_import_details(importer="tocsin.shell.cli", imported="db.platform.tenancy")
    source = (ROOT / "tocsin" / "shell" / "cli.py").read_text().splitlines()
    assert any(source[d["line_number"] - 1].startswith("    ") for d in details)  # an indented import
