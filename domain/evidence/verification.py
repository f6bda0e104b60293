"""Verifying a tenant's evidence chain: the links, and the facts against the rows they name.

Pure: db/evidence/verify.py feeds it the chain in sequence order, the facts not sealed yet,
the head, and the rows of each chained table (their fields rendered by
``canonical_value``); it answers with every break, the first one first.

Each fact kind belongs to one table. An *insert* kind records a row as written (a claim, a
delivery, an attempt, a provider event, a rule version); a *move* kind records a later change
of a mutable column (a claim's status, its delivery or acknowledgement, a delivery's status,
an attempt's outcome). The chain's view of a row is its insert fact with each move laid over
it, in sequence order; the row as it stands must equal that view, field by field.

Adding a fact kind (the audit log's rows, for example) is: a payload function and a trigger in
a tenant migration, a line in ``FACT_KINDS`` below, and the table's query in
db/evidence/verify.py ``SOURCES`` (docs/design/evidence.md, "Adding a fact kind").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from domain.evidence.canonical import GENESIS, JsonValue, chain_hash

__all__ = ["EDITED", "ERASED", "FACT_KINDS", "Break", "ChainReport", "ChainVerifier", "FactKind"]


@dataclass(frozen=True)
class FactKind:
    name: str
    table: str
    insert: bool  # True: the row as written; False: a move of a mutable column


FACT_KINDS: dict[str, FactKind] = {k.name: k for k in (
    FactKind("claim", "notification_ledger", True),
    FactKind("claim_status", "notification_ledger", False),
    FactKind("delivered", "notification_ledger", False),
    FactKind("acknowledged", "notification_ledger", False),
    FactKind("delivery", "notification_deliveries", True),
    FactKind("delivery_status", "notification_deliveries", False),
    FactKind("attempt", "delivery_attempts", True),
    FactKind("attempt_outcome", "delivery_attempts", False),
    FactKind("provider_event", "delivery_events", True),
    FactKind("rule_version", "rule_versions", True),
    FactKind("audit", "audit_log", True),
    FactKind("webhook_delivery", "webhook_deliveries", True),
    FactKind("webhook_delivery_status", "webhook_deliveries", False),
    FactKind("webhook_attempt", "webhook_attempts", True),
    FactKind("webhook_attempt_outcome", "webhook_attempts", False),
    FactKind("sms_delivery", "sms_deliveries", True),
    FactKind("sms_delivery_status", "sms_deliveries", False),
    FactKind("sms_attempt", "sms_attempts", True),
    FactKind("sms_attempt_outcome", "sms_attempts", False),
    FactKind("chat_delivery", "chat_deliveries", True),
    FactKind("chat_delivery_status", "chat_deliveries", False),
    FactKind("chat_attempt", "chat_attempts", True),
    FactKind("chat_attempt_outcome", "chat_attempts", False),
)}


EDITED = "its hash does not match its content (the chained record was edited)"


class _Erased:
    """A personal field whose salt was deleted with the person: it cannot be compared."""

    def __repr__(self) -> str:
        return "ERASED"


ERASED = _Erased()


@dataclass(frozen=True, order=True)
class Break:
    """One place where the evidence no longer holds."""

    seq: int | None  # the chained record that no longer holds (None: a row the chain never saw)
    table: str
    ref: str
    what: str

    def describe(self) -> str:
        where = f"sequence {self.seq}" if self.seq is not None else "not in the chain"
        return f"{where}, {self.table} {self.ref}: {self.what}"

    @property
    def key(self) -> str:
        """What names this break across verifications (one alert per break)."""
        return f"{self.seq}:{self.table}:{self.ref}"


@dataclass
class ChainReport:
    records: int = 0  # chained records checked
    rows: int = 0  # rows compared with the chain's view of them
    pending: int = 0  # facts written and not sealed yet
    head_seq: int = 0
    head_hash: str = GENESIS
    breaks: list[Break] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.breaks

    @property
    def first_break(self) -> Break | None:
        if not self.breaks:
            return None
        return min(self.breaks, key=lambda b: (b.seq is None, b.seq or 0, b.table, b.ref))


# A row's facts, in sequence order: (sequence, fields); 0 for a pending fact.
_Facts = list[tuple[int, dict[str, JsonValue]]]


class ChainVerifier:
    """Feed the chain in sequence order (``record``), then the pending facts (``pending``),
    then each table's rows (``row``); ``finish`` names what is left. ``decode`` parses a
    payload (json.loads; a faster decoder of the same JSON may be given)."""

    def __init__(self, decode: Callable[[str], object] = json.loads) -> None:
        self.report = ChainReport()
        self._expected = 1
        self._prev = GENESIS
        self._decode = decode
        self._facts: dict[tuple[str, str], _Facts] = {}  # (table, ref) -> its facts
        self.broken_links: set[int] = set()  # sequence numbers of the records a link break names

    def record(self, seq: int, kind: str, ref: str, payload: str, prev_hash: str, hash_: str) -> None:
        self.link(seq, kind, ref, payload, prev_hash, hash_)
        self._absorb(kind, ref, payload, seq)

    def link(self, seq: int, kind: str, ref: str, payload: str, prev_hash: str, hash_: str, *,
             content: bool = True) -> None:
        """Check one record's place in the chain and (``content``) its hash, not what it says
        of its row. Without ``content`` the payload is not needed: a verification split in
        parts recomputes each hash where it reads the payload (``fact``)."""
        report = self.report
        report.records += 1
        if seq != self._expected or prev_hash != self._prev or \
                (content and chain_hash(prev_hash, seq, kind, ref, payload) != hash_):
            self._link_break(seq, kind, ref, payload, prev_hash, hash_)
            self.broken_links.add(seq)
        self._expected = seq + 1
        self._prev = hash_
        report.head_seq, report.head_hash = seq, hash_

    def start_after(self, seq: int, hash_: str) -> None:
        """Check a stretch of the chain that goes on after record ``seq`` with hash ``hash_``
        (a verification split by ranges of sequence numbers)."""
        self._expected, self._prev = seq + 1, hash_

    def fact(self, seq: int, kind: str, ref: str, payload: str, prev_hash: str | None = None,
             hash_: str | None = None) -> None:
        """What one chained record says of its row, its place in the chain checked elsewhere
        (a verification split by rows: each part sees the records of its rows only); with
        ``prev_hash`` and ``hash_``, its hash is recomputed too (a break: EDITED)."""
        if prev_hash is not None and chain_hash(prev_hash, seq, kind, ref, payload) != hash_:
            table = FACT_KINDS[kind].table if kind in FACT_KINDS else kind
            self.report.breaks.append(Break(seq, table, ref, EDITED))
        self._absorb(kind, ref, payload, seq)

    def _link_break(self, seq: int, kind: str, ref: str, payload: str, prev_hash: str, hash_: str) -> None:
        table = FACT_KINDS[kind].table if kind in FACT_KINDS else kind
        if seq != self._expected:
            what = (f"sequence {self._expected} is missing (the chain goes on at {seq})"
                    if seq > self._expected else f"sequence {seq} appears out of order")
            found = Break(seq if seq < self._expected else self._expected, table, ref, what)
        elif prev_hash != self._prev:
            found = Break(seq, table, ref, "its previous hash is not the hash of the record "
                          "before it (a record was removed, inserted or reordered)")
        else:
            found = Break(seq, table, ref, EDITED)
        self.report.breaks.append(found)

    def pending(self, kind: str, ref: str, payload: str) -> None:
        self.report.pending += 1
        self._absorb(kind, ref, payload, 0)

    def _absorb(self, kind: str, ref: str, payload: str, seq: int) -> None:
        fact = FACT_KINDS.get(kind)
        if fact is None:
            self.report.breaks.append(Break(seq or None, kind, ref, f"unknown fact kind {kind!r}"))
            return
        try:
            fields = self._decode(payload)
        except ValueError:
            fields = None
        if not isinstance(fields, dict):
            self.report.breaks.append(Break(seq or None, fact.table, ref, "its payload is not a JSON object"))
            return
        key = (fact.table, ref)
        facts = self._facts.get(key)
        if facts is None:
            self._facts[key] = [(seq, fields)]
            if not fact.insert:
                self.report.breaks.append(Break(seq or None, fact.table, ref,
                                                f"a {kind} fact comes before the row's own record"))
        else:
            facts.append((seq, fields))

    def row(self, table: str, ref: str, values: Mapping[str, object]) -> None:
        """One row as it stands, its fields rendered as the chain renders them (or ERASED)."""
        self.report.rows += 1
        facts = self._facts.pop((table, ref), None)
        if facts is None:
            self.report.breaks.append(Break(None, table, ref, "the row was never chained "
                                            "(inserted by hand, or its record was deleted)"))
            return
        if len(facts) == 1:
            view = facts[0][1]
        else:
            view = {}
            for _seq, fields in facts:
                view.update(fields)
        for name, value in values.items():
            if value is not ERASED and view.get(name) != value:
                seq = next((s for s, f in reversed(facts) if name in f), facts[0][0])
                said = _show(view.get(name))
                self.report.breaks.append(Break(
                    seq or None, table, ref, f"{name} is {_show(value)}, the chain says {said}"))
                return

    def finish(self, head_seq: int, head_hash: str, rows_checked: Iterable[str]) -> ChainReport:
        """``rows_checked``: the tables whose rows were fed; a chained row of one of them that
        was not fed has been deleted."""
        self.missing_rows(rows_checked)
        return self.check_head(head_seq, head_hash)

    def missing_rows(self, rows_checked: Iterable[str]) -> ChainReport:
        """Name each chained row of ``rows_checked``'s tables that was not fed (deleted)."""
        tables = set(rows_checked)
        for (table, ref), facts in sorted(self._facts.items()):
            if table in tables:
                self.report.breaks.append(
                    Break(facts[0][0] or None, table, ref, "the row is missing (deleted)"))
        self._facts.clear()
        return self.report

    def check_head(self, head_seq: int, head_hash: str) -> ChainReport:
        """The head must name the chain's last record (its sequence and hash)."""
        if (head_seq, head_hash) != (self.report.head_seq, self.report.head_hash):
            self.report.breaks.append(Break(
                self.report.head_seq + 1 if head_seq > self.report.head_seq else head_seq,
                "evidence_head", "head",
                f"the head says sequence {head_seq}, the chain ends at {self.report.head_seq} "
                "(records were removed from its end, or the head was edited)"))
        return self.report


def _show(value: object) -> str:
    return "missing" if value is None else repr(value)
