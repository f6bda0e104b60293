"""Tenant-written notice templates: Liquid (python-liquid) rendered in a sandbox with limits.

A template is text a tenant admin typed, so it is treated as hostile input:
- it sees only plain data (dicts, lists, strings, numbers, booleans) built from the facts
  by `template_context`; Liquid resolves `a.b` as an item lookup (`a["b"]`), never as a
  Python attribute, so `{{ field.__class__ }}` finds no key and renders nothing;
- every render is bounded as a whole (domain/rules/template_limits.py): loop iterations of all its
  loops together, the length of any range or sequence a filter builds (a range is refused
  before it is built), output size, what `assign`/`capture` may hold, wall time; block
  nesting and source length are checked when parsing. Reaching a limit stops the render at
  that point and refuses it (TemplateTooCostly);
- `include`/`render` find no templates (there is no loader), so nothing can be pulled in.
An undefined name renders as empty text (Liquid's default): a notice about a subject that
lacks a field reads "Amount: " rather than failing, the same way a missing fact is a
defined result for conditions. Every other error refuses the whole template: a notice
renders completely or not at all.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import date, datetime
from decimal import Decimal
from functools import lru_cache

from liquid import BoundTemplate
from liquid.exceptions import (
    LiquidError,
    LocalNamespaceLimitError,
    LoopIterationLimitError,
    OutputStreamLimitError,
    ResourceLimitError,
)

from domain.errors import TocsinError
from domain.rules.template_limits import (
    MAX_LOCALS_SIZE,
    MAX_LOOP_ITERATIONS,
    MAX_OUTPUT_CHARS,
    Budget,
    Clock,
    SandboxContext,
    SandboxEnvironment,
    SandboxOutput,
    bound_ranges,
)

__all__ = [
    "DEFAULT_BODY",
    "DEFAULT_TITLE",
    "MAX_TEMPLATE_CHARS",
    "MAX_VALUE_DEPTH",
    "TemplateRefused",
    "TemplateTooCostly",
    "check",
    "render",
    "template_context",
]

MAX_TEMPLATE_CHARS = 10_000  # characters of template source
MAX_VALUE_DEPTH = 8  # nesting of the data handed to a template (lists and dicts)

# What a rule's notice says when its own template is refused at send time: the notice
# still goes out (the claim is the evidence; an admin is told on Needs attention), in
# words that only read what every subject has.
DEFAULT_TITLE = "{{ rule.name }}: {{ subject.kind }} {{ subject.external_id }}"
DEFAULT_BODY = ("The rule \"{{ rule.name }}\" fired for {{ subject.kind }} {{ subject.external_id }}"
                "{% if subject.title and subject.title != '' %} ({{ subject.title }}){% endif %}.\n\n"
                "Its own template could not be rendered for this notice, so this is the standard "
                "text; an administrator can see why on the Needs attention page.")


class TemplateRefused(TocsinError):
    """The template cannot be used: a parse error, a limit reached, any render error.
    ``reason`` is written for the admin who wrote it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TemplateTooCostly(TemplateRefused):
    """The render reached one of the sandbox's limits (iterations, a range or sequence,
    output, memory, time): refused at save time when a dry render reaches it."""


# One shared environment: strict mode (errors raise, never warn), no loader, no globals,
# no autoescape (the notice is plain text; the portal's own templates escape it on display).
_ENV = SandboxEnvironment()


# What python-liquid's own limit errors leave unsaid: the limit, in the admin's terms.
_LIMIT_WORDS: dict[type[LiquidError], str] = {
    LoopIterationLimitError: f"a template's loops may run at most {MAX_LOOP_ITERATIONS} times in all",
    OutputStreamLimitError: f"a template may write at most {MAX_OUTPUT_CHARS} characters",
    LocalNamespaceLimitError: f"assign and capture may hold at most about {MAX_LOCALS_SIZE} bytes",
}


def _reason(error: LiquidError) -> str:
    message = str(error.message) if error.message is not None else type(error).__name__
    words = _LIMIT_WORDS.get(type(error))
    if words is not None and ":" not in message:
        message = f"{message}: {words}"
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
        template = _ENV.from_string(text)
        bound_ranges(template)
    except ResourceLimitError as error:
        raise TemplateTooCostly(_reason(error)) from None
    except LiquidError as error:
        raise TemplateRefused(_reason(error)) from None
    except RecursionError:
        raise TemplateRefused("the template nests too deeply") from None
    return template


def check(text: str) -> list[str]:
    """Why this template cannot be saved (empty: it parses within the limits). For
    validation on save: a rule whose template would be refused at send time is refused now.
    A dry render against a sample subject (db/rules/template_preview.py) adds the limits only a
    render reaches."""
    try:
        _parse(text)
    except TemplateRefused as refused:
        return [refused.reason]
    return []


def render(text: str, context: Mapping[str, object], *, clock: Clock = time.monotonic) -> str:
    """The rendered text, or TemplateRefused (TemplateTooCostly past a limit): a template
    renders completely or not at all. ``context`` must hold plain data only (see
    template_context). ``clock`` times the render (a test's clock can make it run out)."""
    template = _parse(text)
    budget = Budget(clock)
    sandbox = SandboxContext(template, globals=template.make_globals(_plain(context, 0)), budget=budget)
    output = SandboxOutput(budget)
    try:
        template.render_with_context(sandbox, output)
        return output.getvalue()
    except ResourceLimitError as error:
        raise TemplateTooCostly(_reason(error)) from None
    except LiquidError as error:
        raise TemplateRefused(_reason(error)) from None
    except (RecursionError, MemoryError) as error:
        raise TemplateTooCostly(f"the template could not be rendered: {type(error).__name__}") from None
    except (ArithmeticError, TypeError, ValueError) as error:
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
