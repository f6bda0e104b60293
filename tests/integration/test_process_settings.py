"""Settings are read once per process and handed down: importing the product needs no
running service and no settings, and no module reads the environment behind the entry
points' back."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("actors", "db", "domain", "portal", "tocsin")
# The bootstraps: each reads the settings once for its process (tocsin/core/runtime.py holds
# them); the supervisor reads them for the processes it starts, the settings module defines them.
READS_SETTINGS = {
    "tocsin/core/runtime.py", "tocsin/shell/processes.py", "tocsin/boot/worker.py", "tocsin/boot/clock.py",
    "tocsin/boot/web.py", "tocsin/core/settings.py",
    "tocsin/boot/settings_doc.py",  # runs the loaders on a recording environment to document them
}


def _python_files() -> list[Path]:
    return sorted(p for package in PRODUCT for p in (ROOT / package).rglob("*.py"))


def test_importing_the_portal_and_every_actor_needs_no_settings_and_no_running_redis() -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "SES_ENDPOINT_URL", "OPS_TOPIC_ARN")}
    env["REDIS_URL"] = "redis://127.0.0.1:1/0"  # nothing listens there
    code = ("import portal.app, actors, tocsin.boot.worker, tocsin.boot.web, tocsin.boot.cli; "
            "import dramatiq; print(type(dramatiq.get_broker()).__name__)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "_Placeholder"  # no broker built by an import


def test_only_the_entry_points_read_the_settings_from_the_environment() -> None:
    readers = []
    for path in _python_files():
        relative = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(), relative)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) \
                    == "load_settings":
                readers.append(relative)
    assert set(readers) <= READS_SETTINGS, sorted(set(readers) - READS_SETTINGS)


def test_no_product_module_writes_to_the_environment() -> None:
    writes = []
    for path in _python_files():
        relative = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), relative)):
            target = None
            if isinstance(node, ast.Assign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                target = next((t for t in targets if isinstance(t, ast.Subscript)), None)
                if target is not None and ast.unparse(target.value) == "os.environ":
                    writes.append(f"{relative}: {ast.unparse(node)}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and ast.unparse(node.func.value) == "os.environ" \
                    and node.func.attr in ("update", "setdefault", "pop", "__setitem__"):
                writes.append(f"{relative}: {ast.unparse(node)}")
    # pgserver finds its socket directory through XDG_RUNTIME_DIR, which only the process
    # that starts the embedded PostgreSQL sets, before starting it.
    assert writes == [
        "tocsin/shell/services.py: os.environ.setdefault('XDG_RUNTIME_DIR', str(home / 'run'))"
    ], writes
