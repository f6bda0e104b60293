"""Every UPDATE of a status column in db/ takes its guard from the column's machine.

The test reads the SQL of every db/ module as written (string literals and f-strings, an
interpolated value kept as the expression it interpolates), finds each statement that sets
the status of a table with a machine (an UPDATE, or an upsert's DO UPDATE), and fails on
one whose WHERE does not interpolate ``<MACHINE>.where(...)`` of that table's machine,
directly or through a module-level name bound to it. subjects.status is the host's own
word for its record and has no machine.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Each table's status machine, by the name db/ imports it under (the triggers of tenant
# migration 0017 name the same machines; tests/integration/test_state_machines.py checks).
MACHINE_OF_TABLE = {
    "notification_deliveries": "DELIVERY",
    "notification_ledger": "CLAIM",
    "events": "EVENT",
    "clients": "LICENCE",
    "webhook_deliveries": "WEBHOOK",
    "chat_deliveries": "CHAT",
    "sms_deliveries": "DELIVERY",
}

_MARK = re.compile(r"\x00(\d+)\x00")
_TABLE = r"(?:\{\w*\}\.|\x00\d+\x00\.|\w+\.)?(?P<table>\w+)\b"
_UPDATE = re.compile(rf"\bUPDATE\s+{_TABLE}", re.IGNORECASE)
_INSERT = re.compile(rf"\bINSERT\s+INTO\s+{_TABLE}", re.IGNORECASE)
_DO_UPDATE = re.compile(r"\bDO\s+UPDATE\b", re.IGNORECASE)
_SET = re.compile(r"\bSET\b", re.IGNORECASE)
_SETS_STATUS = re.compile(r"(?:^|,)\s*(?:\w+\.)?status\s*=", re.IGNORECASE)
_CLAUSE_END = re.compile(r"\b(?:FROM|WHERE|RETURNING)\b", re.IGNORECASE)
_WHERE = re.compile(r"\bWHERE\b", re.IGNORECASE)
_RETURNING = re.compile(r"\bRETURNING\b", re.IGNORECASE)


@dataclass(frozen=True)
class StatusUpdate:
    line: int  # of the string holding the statement
    table: str
    guards: frozenset[str]  # the machines whose guard its WHERE interpolates

    @property
    def guarded(self) -> bool:
        return MACHINE_OF_TABLE[self.table] in self.guards


def _statement_end(text: str, start: int) -> int:
    """Where the statement starting at ``start`` ends: the parenthesis closing the CTE it
    sits in, a semicolon, or the end of the text (quotes skipped)."""
    depth, quoted = 0, False
    for i in range(start, len(text)):
        c = text[i]
        if c == "'":
            quoted = not quoted
        elif quoted:
            continue
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                return i
        elif c == ";" and depth == 0:
            return i
    return len(text)


def _top_level(text: str) -> str:
    """``text`` with what is inside parentheses and quotes blanked, lengths kept: the
    keywords left are the statement's own."""
    out, depth, quoted = [], 0, False
    for c in text:
        if c == "'" and depth == 0:
            quoted = not quoted
            out.append(" ")
        elif quoted:
            out.append(" ")
        elif c == "(":
            depth += 1
            out.append(" ")
        elif c == ")":
            depth = max(depth - 1, 0)
            out.append(" ")
        else:
            out.append(" " if depth else c)
    return "".join(out)


def _guards_in(expr: ast.expr, module_names: dict[str, ast.expr], seen: frozenset[str] = frozenset()
               ) -> set[str]:
    """The machines whose ``where`` the expression calls, itself or through module names."""
    found = set()
    for node in ast.walk(expr):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "where" and isinstance(node.func.value, ast.Name)):
            found.add(node.func.value.id)
        elif isinstance(node, ast.Name) and node.id in module_names and node.id not in seen:
            found |= _guards_in(module_names[node.id], module_names, seen | {node.id})
    return found


def _render(node: ast.expr, exprs: list[ast.expr]) -> str | None:
    """The SQL text of a string expression, each interpolated value as a numbered mark."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                exprs.append(value.value)
                parts.append(f"\x00{len(exprs) - 1}\x00")
            else:
                parts.append(_render(value, exprs) or "")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _render(node.left, exprs), _render(node.right, exprs)
        return None if left is None or right is None else left + right
    return None


def _strings(tree: ast.Module) -> Iterator[tuple[int, str, list[ast.expr]]]:
    """Every outermost string expression of the module, rendered."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if id(node) in inside or not isinstance(node, ast.expr):
            continue
        exprs: list[ast.expr] = []
        text = _render(node, exprs)
        if text is None:
            continue
        inside.update(id(n) for n in ast.walk(node))
        yield node.lineno, text, exprs


def _module_names(tree: ast.Module) -> dict[str, ast.expr]:
    names: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            names[node.target.id] = node.value
    return names


def _writes(text: str) -> Iterator[tuple[str, int]]:
    """(table, where its SET begins) for each status-table write in the text."""
    for match in _UPDATE.finditer(text):
        if match.group("table") in MACHINE_OF_TABLE:
            yield match.group("table"), match.end()
    for match in _INSERT.finditer(text):
        if match.group("table") in MACHINE_OF_TABLE:
            end = _statement_end(text, match.end())
            upsert = _DO_UPDATE.search(_top_level(text[match.end():end]))
            if upsert:
                yield match.group("table"), match.end() + upsert.end()


def status_updates(source: str) -> list[StatusUpdate]:
    """Every statement in ``source`` (a module's text) that sets a machine's status column."""
    tree = ast.parse(source)
    module_names = _module_names(tree)
    found = []
    for line, text, exprs in _strings(tree):
        for table, start in _writes(text):
            end = _statement_end(text, start)
            statement = text[start:end]
            flat = _top_level(statement)
            set_at = _SET.search(flat)
            if set_at is None:
                continue
            clause_end = _CLAUSE_END.search(flat, set_at.end())
            set_clause = flat[set_at.end():clause_end.start() if clause_end else len(flat)]
            if not _SETS_STATUS.search(set_clause):
                continue
            where_at = _WHERE.search(flat, set_at.end())
            guards: set[str] = set()
            if where_at is not None:
                returning = _RETURNING.search(flat, where_at.end())
                where = statement[where_at.end():returning.start() if returning else len(statement)]
                for mark in _MARK.finditer(where):
                    guards |= _guards_in(exprs[int(mark.group(1))], module_names)
            found.append(StatusUpdate(line, table, frozenset(guards)))
    return found


def _db_modules() -> list[Path]:
    return sorted((ROOT / "db").rglob("*.py"))


def test_every_status_update_in_db_takes_its_guard_from_the_tables_machine() -> None:
    unguarded = [
        f"{path.relative_to(ROOT)}:{u.line}: UPDATE {u.table} SET status without "
        f"{MACHINE_OF_TABLE[u.table]}.where(...) in its WHERE"
        for path in _db_modules() for u in status_updates(path.read_text()) if not u.guarded
    ]
    assert unguarded == []


def test_the_scan_finds_the_status_writers_of_every_machine() -> None:
    """A cross-check by plain text: each line of db/ that begins a SET with the status (of
    any table but subjects) is one the scan read as a statement."""
    updates = [u for path in _db_modules() for u in status_updates(path.read_text())]
    assert {u.table for u in updates} == set(MACHINE_OF_TABLE)
    by_text = sum(len(re.findall(r"\bSET\s+(?:\w+\.)?status\s*=", path.read_text()))
                  for path in _db_modules())
    assert len(updates) >= by_text >= 28  # 28 when this test was written


SAMPLE = '''
from domain.delivery.states import DELIVERY, Status
from domain.events.states import EVENT
_GUARD = DELIVERY.where(to=Status.CANCELLED, alias="d")
_GUARDS = {s: DELIVERY.where(to=s) for s in ("cancelled", "batched")}
HAND_WRITTEN = """UPDATE notification_deliveries d SET status = 'cancelled' WHERE d.status IN ('pending')"""
GUARDED = f"""UPDATE notification_deliveries d SET status = 'cancelled' WHERE d.id = %s AND {_GUARD}"""
INLINE = f"UPDATE events SET status = 'pending', last_error = %s WHERE {EVENT.where(to='pending')}"
BY_TARGET = f"UPDATE notification_deliveries SET status = %(to)s WHERE id = %(id)s AND {_GUARDS[to]}"
WRONG_MACHINE = f"UPDATE clients SET status = 'closed' WHERE id = %s AND {DELIVERY.where(to='cancelled')}"
GUARD_IN_SET = f"UPDATE events SET status = 'failed', last_error = '{EVENT.where(to='failed')}' WHERE id = %s"
GUARD_OUTSIDE = f"WITH x AS (UPDATE notification_ledger SET status = 'skipped' WHERE id = 1) SELECT {_GUARD}"
NO_WHERE = "UPDATE clients SET status = 'active'"
IN_A_CTE = "WITH a AS (SELECT 1), b AS (UPDATE events e SET lease_until = NULL, status = 'failed' FROM a)"
SCHEMA_TEMPLATE = "UPDATE {s}.notification_ledger l SET status = 'cancelled' WHERE l.id = %s"
UPSERT = "INSERT INTO clients (id, status) VALUES (%s, 'active') ON CONFLICT (id) DO UPDATE SET status = 'x'"
SPLIT = "UPDATE events SET status = 'failed' " + "WHERE id = %s"
NOT_A_STATUS_WRITE = "UPDATE notification_deliveries SET status_reason = %s WHERE status = 'unknown'"
NOT_A_MACHINE = "UPDATE subjects SET status = %s WHERE id = %s"
LOCKING = "SELECT id FROM events WHERE status = 'pending' FOR UPDATE SKIP LOCKED"
'''


def test_the_scan_catches_hand_written_status_guards_and_accepts_the_machines() -> None:
    names = {n + 1: line.split(" = ")[0] for n, line in enumerate(SAMPLE.splitlines())}
    verdicts = {names[u.line]: u.guarded for u in status_updates(SAMPLE)}
    assert verdicts == {
        "HAND_WRITTEN": False, "GUARDED": True, "INLINE": True, "BY_TARGET": True,
        "WRONG_MACHINE": False, "GUARD_IN_SET": False, "GUARD_OUTSIDE": False, "NO_WHERE": False,
        "IN_A_CTE": False, "SCHEMA_TEMPLATE": False, "UPSERT": False, "SPLIT": False,
    }
