"""Every module of the product says which of its names are public (__all__), and each name
it lists exists: a newcomer reads a module's contract at its top, and a star import or a
re-export cannot pick up a helper by accident."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("domain", "db", "actors", "portal", "tocsin")


def _modules() -> list[Path]:
    return sorted(p for package in PRODUCT for p in (ROOT / package).rglob("*.py"))


def _declared(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = node.value
            assert isinstance(value, ast.List | ast.Tuple)
            return [str(e.value) for e in value.elts if isinstance(e, ast.Constant)]
    return None


def _defined(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


def test_every_module_with_public_names_declares_them() -> None:
    missing = []
    for path in _modules():
        tree = ast.parse(path.read_text(), str(path))
        if path.name == "__init__.py" and not any(
                isinstance(n, ast.FunctionDef | ast.ClassDef | ast.Assign) for n in tree.body):
            continue  # a package's docstring only
        if _declared(tree) is None:
            missing.append(str(path.relative_to(ROOT)))
    assert missing == []


def test_every_name_a_module_declares_public_exists() -> None:
    unknown = []
    for path in _modules():
        tree = ast.parse(path.read_text(), str(path))
        declared = _declared(tree) or []
        unknown += [f"{path.relative_to(ROOT)}: {name}" for name in declared if name not in _defined(tree)]
    assert unknown == []
