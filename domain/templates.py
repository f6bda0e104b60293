"""Tenant-written notice templates: Liquid (python-liquid) rendered in a sandbox with limits.

A template is text a tenant admin typed, so it is treated as hostile input:
- it sees only plain data (dicts, lists, strings, numbers, booleans) built from the facts
  by `template_context`; Liquid resolves `a.b` as an item lookup (`a["b"]`), never as a
  Python attribute, so `{{ field.__class__ }}` finds no key and renders nothing;
- every render is bounded: loop iterations (counted across nested loops), output size,
  the size of what `assign`/`capture` may hold, block nesting (checked when parsing) and
  template source length; reaching a limit stops the render at that point and refuses it;
- `include`/`render` find no templates (there is no loader), so nothing can be pulled in.
An undefined name renders as empty text (Liquid's default): a notice about a subject that
lacks a field reads "Amount: " rather than failing, the same way a missing fact is a
defined result for conditions. Every other error refuses the whole template: a notice
renders completely or not at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from decimal import Decimal
from functools import lru_cache
from typing import ClassVar

from liquid import BoundTemplate, Environment
from liquid.exceptions import LiquidError, ResourceLimitError

from domain.errors import TocsinError

MAX_TEMPLATE_CHARS = 10_000  # characters of template source
MAX_OUTPUT_CHARS = 20_000  # characters a render may write
MAX_LOOP_ITERATIONS = 1_000  # iterations of all loops of one render together
MAX_LOCALS_SIZE = 20_000  # python-liquid's size estimate of what assign/capture hold
MAX_BLOCK_NESTING = 12  # blocks inside blocks, checked when parsing
MAX_CONTEXT_DEPTH = 5  # nested render contexts (include/render; none can be found here)
MAX_VALUE_DEPTH = 8  # nesting of the data handed to a template (lists and dicts)


class TemplateRefused(TocsinError):
    """The template cannot be used: a parse error, a limit reached, any render error.
    ``reason`` is written for the admin who wrote it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Sandbox(Environment):
    # python-liquid reads its limits from class variables.
    loop_iteration_limit: ClassVar[int | None] = MAX_LOOP_ITERATIONS
    output_stream_limit: ClassVar[int | None] = MAX_OUTPUT_CHARS
    local_namespace_limit: ClassVar[int | None] = MAX_LOCALS_SIZE
    block_nesting_limit: ClassVar[int] = MAX_BLOCK_NESTING
    context_depth_limit: ClassVar[int] = MAX_CONTEXT_DEPTH


# One shared environment: strict mode (errors raise, never warn), no loader, no globals,
# no autoescape (the notice is plain text; the portal's own templates escape it on display).
_ENV = _Sandbox()


def _reason(error: LiquidError) -> str:
    message = str(error.message) if error.message is not None else type(error).__name__
    if isinstance(error, ResourceLimitError):
        message = f"{message} (a template may loop at most {MAX_LOOP_ITERATIONS} times and " \
                  f"write at most {MAX_OUTPUT_CHARS} characters)"
    token = error.token
    if token is None or token.start_index < 0:
        return message
    before = token.source[: token.start_index]
    line = before.count("\n") + 1
    column = token.start_index - (before.rfind("\n") + 1) + 1
    return f"{message} at line {line}, column {column}"


@lru_cache(maxsize=1024)
def _parse(text: str) -> BoundTemplate:
    """The parsed template, kept for the next notice of the same rule version (a parsed
    template holds no state between renders; parsing was most of a notice's rendering)."""
    if len(text) > MAX_TEMPLATE_CHARS:
        raise TemplateRefused(f"the template is {len(text)} characters long; "
                              f"keep it under {MAX_TEMPLATE_CHARS}")
    try:
        return _ENV.from_string(text)
    except LiquidError as error:
        raise TemplateRefused(_reason(error)) from None
    except RecursionError:
        raise TemplateRefused("the template nests too deeply") from None


def check(text: str) -> list[str]:
    """Why this template cannot be saved (empty: it parses within the limits). For
    validation on save: a rule whose template would be refused at send time is refused now."""
    try:
        _parse(text)
    except TemplateRefused as refused:
        return [refused.reason]
    return []


def render(text: str, context: Mapping[str, object]) -> str:
    """The rendered text, or TemplateRefused: a template renders completely or not at all.
    ``context`` must hold plain data only (see template_context)."""
    template = _parse(text)
    try:
        return str(template.render(**_plain(context, 0)))
    except LiquidError as error:
        raise TemplateRefused(_reason(error)) from None
    except (RecursionError, MemoryError, ArithmeticError, TypeError, ValueError) as error:
        # A filter given something odd (a huge number, a wrong type) in a way Liquid does
        # not translate itself: refused like any other render error.
        raise TemplateRefused(f"the template could not be rendered: {type(error).__name__}") from None


def _plain(value: Mapping[str, object], depth: int) -> dict[str, object]:
    return {str(k): _plain_value(v, depth + 1) for k, v in value.items()}


def _plain_value(value: object, depth: int) -> object:
    """Only data a template may walk: anything else becomes its text, so no Python object
    (with attributes, methods, a __getitem__ of its own) ever reaches the renderer."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth > MAX_VALUE_DEPTH:
        return ""
    if isinstance(value, Mapping):
        return _plain(value, depth)
    if isinstance(value, (list, tuple)):
        return [_plain_value(v, depth + 1) for v in value]
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    return str(value)


def template_context(
    facts: Mapping[str, object],
    *,
    event_type: str | None = None,
    trigger: str | None = None,
    metadata: Mapping[str, object] | None = None,
    changes: Mapping[str, object] | None = None,
    rule_name: str | None = None,
    due: Mapping[str, object] | None = None,
    turnaround: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The names a template sees, nested from flat fact names: `field.amount` becomes
    {{ field.amount }}, `form.intake.q1` {{ form.intake.q1 }}, `hierarchy.region`,
    `subject.title`; the event as {{ event.type }}, {{ event.trigger }} and its metadata
    keys ({{ event.form }}); {{ changes["field.amount"].to }}; {{ rule.name }}. A time rule's
    notice also sees {{ due.date }}, {{ due.offset_days }} (also {{ due["offset"] }}: offset
    is a keyword of Liquid's grammar) and {{ due.milestone_date }} (the first day of the
    milestone's window), or {{ turnaround.started_at }} and
    {{ turnaround.breach_at }}.
    A fact whose name clashes with a shorter one (`a` and `a.b`) keeps the shorter one."""
    root: dict[str, object] = {}
    for name in sorted(facts, key=lambda n: (n.count("."), n)):
        parts = name.split(".")
        node = root
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            node.setdefault(parts[-1], _plain_value(facts[name], 1))
    event: dict[str, object] = {}
    for key, value in (metadata or {}).items():
        event[str(key)] = _plain_value(value, 2)
    event["type"] = event_type
    event["trigger"] = trigger
    root["event"] = event
    root["changes"] = _plain(changes or {}, 1)
    root["rule"] = {"name": rule_name}
    if due is not None:
        root["due"] = _plain(due, 1)
    if turnaround is not None:
        root["turnaround"] = _plain(turnaround, 1)
    return root
