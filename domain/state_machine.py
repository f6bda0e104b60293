"""A status column's state machine: its states, the moves between them, and the SQL guard
an UPDATE of that column takes from it.

Each machine is the one source of a column's moves. The writers in db/ put
``MACHINE.where(to=...)`` in the WHERE of every UPDATE that sets the column (a test reads
db/ and fails on one that does not), and PostgreSQL checks every change of the column
against the same moves (control.state_moves, written from the machines by every migration
run). A guard asked for a move the machine does not have raises where it is built, at
import time for the module constants that hold them, instead of matching no row in
production.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TypeVar

__all__ = ["IllegalMove", "StateMachine"]

# States and aliases are interpolated into SQL: only plain lower-case words may be either.
_WORD = re.compile(r"[a-z][a-z0-9_]*")


State = TypeVar("State", bound=str)  # a machine's states: plain strings or a StrEnum


class IllegalMove(ValueError):
    """A guard or a check names a move (or a state) its machine does not have."""


@dataclass(frozen=True)
class StateMachine:
    name: str  # the machine's name in control.state_moves and in its table's trigger
    states: frozenset[str]
    moves: frozenset[tuple[str, str]]  # (from, to); (s, s) when a writer may rewrite a row in s

    @classmethod
    def of(cls, name: str, moves: Mapping[State, Iterable[State]]) -> StateMachine:
        """A machine from each state's allowed next states; every state is a key, a final
        one with no next state."""
        states = frozenset(str(s) for s in moves)
        pairs = frozenset((str(a), str(b)) for a, targets in moves.items() for b in targets)
        for word in {name} | states:
            if not _WORD.fullmatch(word):
                raise ValueError(f"{word!r} is not a plain lower-case word")
        unknown = {b for _, b in pairs} - states
        if unknown:
            raise IllegalMove(f"machine {name}: moves to undeclared states {sorted(unknown)}")
        return cls(name, states, pairs)

    def sources(self, to: str | Iterable[str]) -> frozenset[str]:
        """The states from which a row may move to every one of ``to``."""
        targets = self._targets(to)
        return frozenset(s for s in self.states if all((s, t) in self.moves for t in targets))

    def where(self, to: str | Iterable[str], *, from_: Iterable[str] | None = None,
              within: Iterable[str] | None = None, alias: str | None = None) -> str:
        """The WHERE condition of an UPDATE that sets this column to ``to`` (one state, or
        several when the UPDATE picks one per row with CASE): the row's status is one it
        may move from. ``from_`` names the states the UPDATE means to move, and each must
        be allowed to reach every target (IllegalMove otherwise); ``within`` keeps only
        the allowed sources among these. A guard that could match no row raises too.

        ``DELIVERY.where(to="accepted", alias="d")`` is ``d.status IN ('sending', 'unknown')``.
        """
        targets = self._targets(to)
        return _render(self, targets,
                       None if from_ is None else frozenset(self._state(s) for s in _states(from_)),
                       None if within is None else frozenset(self._state(s) for s in _states(within)),
                       alias)

    def _state(self, state: str) -> str:
        if str(state) not in self.states:
            raise IllegalMove(f"machine {self.name} has no state {state!r}")
        return str(state)

    def _targets(self, to: str | Iterable[str]) -> frozenset[str]:
        targets = frozenset(self._state(t) for t in _states(to))
        if not targets:
            raise IllegalMove(f"machine {self.name}: a guard needs a target state")
        return targets


def _states(value: str | Iterable[str]) -> list[str]:
    return [value] if isinstance(value, str) else [str(s) for s in value]


@cache
def _render(machine: StateMachine, targets: frozenset[str], from_: frozenset[str] | None,
            within: frozenset[str] | None, alias: str | None) -> str:
    allowed = machine.sources(targets)
    if from_ is not None:
        refused = sorted(from_ - allowed)
        if refused:
            raise IllegalMove(f"machine {machine.name} cannot move from {', '.join(refused)} "
                              f"to {', '.join(sorted(targets))}")
        allowed = from_
    if within is not None:
        allowed &= within
    if not allowed:
        raise IllegalMove(f"machine {machine.name}: no state may move to {', '.join(sorted(targets))}"
                          + ("" if within is None else f" from among {', '.join(sorted(within))}"))
    if alias is not None and not _WORD.fullmatch(alias):
        raise ValueError(f"{alias!r} is not a table alias")
    column = "status" if alias is None else f"{alias}.status"
    return f"{column} IN ({', '.join(repr(s) for s in sorted(allowed))})"
