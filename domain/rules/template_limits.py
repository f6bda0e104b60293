"""The template sandbox's limits, counted over the whole render (domain/rules/templates.py renders).

python-liquid's own limits are kept (output size, what assign/capture may hold, block
nesting), and what they leave open is closed here, because each gap let one tenant's admin
take the memory or the time of a process every tenant shares:
- loops: python-liquid checks each loop against the product of the loops around it, so five
  loops of 900 one after the other passed a limit of 1,000; here every loop's iterations are
  added to one count for the render, taken when the loop starts (a ``break`` gives none back);
- ranges: ``(1..N)`` is lazy, but a filter (``join``, ``sort``, ``reverse``), a reversed loop
  or an offset walks or builds all N items first. A range longer than the iteration limit is
  refused when it is evaluated, before anything is built from it (and when the template is
  parsed, when both ends are written as numbers);
- filters: each result is measured (a sequence longer than the iteration limit, a text longer
  than MAX_FILTER_TEXT), and the two filters that multiply their input (``join`` with a long
  separator, ``replace`` with a long replacement) are refused from their arguments' sizes,
  before they build anything;
- wall time: a render that has run MAX_RENDER_SECONDS is stopped at its next loop, filter,
  variable lookup or write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import wraps
from typing import Any, ClassVar

from liquid import BoundTemplate, Environment, RenderContext
from liquid.builtin.expressions.primitive import IntegerLiteral, RangeLiteral
from liquid.exceptions import (
    LoopIterationLimitError,
    OutputStreamLimitError,
    ResourceLimitError,
)
from liquid.expression import Expression
from liquid.output import LimitedStringIO

__all__ = [
    "MAX_BLOCK_NESTING",
    "MAX_CONTEXT_DEPTH",
    "MAX_FILTER_TEXT",
    "MAX_LOCALS_SIZE",
    "MAX_LOOP_ITERATIONS",
    "MAX_OUTPUT_CHARS",
    "MAX_RENDER_SECONDS",
    "MAX_SEQUENCE_ITEMS",
    "BoundedRange",
    "Budget",
    "Clock",
    "RenderTimeLimitError",
    "SandboxContext",
    "SandboxEnvironment",
    "SandboxOutput",
    "SequenceLimitError",
    "bound_ranges",
    "bounded_filter",
]

MAX_OUTPUT_CHARS = 20_000  # characters a render may write
MAX_LOOP_ITERATIONS = 1_000  # iterations of all loops of one render together; also a range's length
MAX_SEQUENCE_ITEMS = MAX_LOOP_ITERATIONS  # items of a sequence a filter builds
MAX_FILTER_TEXT = 50_000  # characters of a text a filter builds
MAX_LOCALS_SIZE = 20_000  # python-liquid's size estimate of what assign/capture hold
MAX_BLOCK_NESTING = 12  # blocks inside blocks, checked when parsing
# Namespaces stacked in one render: python-liquid's own five, then one per loop inside loops
# (so bounded by the block nesting). 5 made a loop inside a loop fail; include and render,
# the recursion this guards against elsewhere, can load nothing here.
MAX_CONTEXT_DEPTH = 5 + MAX_BLOCK_NESTING
MAX_RENDER_SECONDS = 1.0  # seconds of wall time one render may take

Clock = Callable[[], float]  # seconds, monotonic


class SequenceLimitError(ResourceLimitError):
    """A range or a filter would build a sequence or a text past its limit."""


class RenderTimeLimitError(ResourceLimitError):
    """The render ran out of its wall time."""


class Budget:
    """What one render may still spend: loop iterations and wall time."""

    __slots__ = ("_clock", "_deadline", "iterations")

    def __init__(self, clock: Clock, seconds: float = MAX_RENDER_SECONDS) -> None:
        self._clock = clock
        self._deadline = clock() + seconds
        self.iterations = 0

    def check_time(self) -> None:
        if self._clock() > self._deadline:
            raise RenderTimeLimitError(
                f"render time limit reached: a template may take at most {MAX_RENDER_SECONDS:g} "
                "second to render", token=None)

    def spend_iterations(self, count: int) -> None:
        self.check_time()
        self.iterations += count
        if self.iterations > MAX_LOOP_ITERATIONS:
            raise LoopIterationLimitError(
                f"loop iteration limit reached: the template's loops would run more than "
                f"{MAX_LOOP_ITERATIONS} times in all", token=None)


class SandboxContext(RenderContext):
    """A render context that charges loops, lookups and buffers to the render's Budget."""

    __slots__ = ("budget",)
    budget: Budget

    def __init__(self, template: BoundTemplate, *args: Any, budget: Budget | None = None,
                 **kwargs: Any) -> None:
        super().__init__(template, *args, **kwargs)
        parent = kwargs.get("parent_context")
        found = budget or (parent.budget if isinstance(parent, SandboxContext) else None)
        if found is None:
            raise RuntimeError("a sandbox render needs its budget")  # pragma: no cover
        self.budget = found

    def raise_for_loop_limit(self, length: int = 1) -> None:
        super().raise_for_loop_limit(length)  # nested loops' product (python-liquid's own check)
        self.budget.spend_iterations(length)  # every loop of the render together

    def get(self, path: list[object], *args: Any, **kwargs: Any) -> object:
        self.budget.check_time()
        return super().get(path, *args, **kwargs)

    def get_buffer(self, buf: Any = None) -> Any:
        carry = buf.size if isinstance(buf, LimitedStringIO) else 0
        return SandboxOutput(self.budget, MAX_OUTPUT_CHARS - carry)


class SandboxOutput(LimitedStringIO):
    """python-liquid's limited output, which also checks the render's time at each write."""

    def __init__(self, budget: Budget, limit: int = MAX_OUTPUT_CHARS) -> None:
        super().__init__(limit=limit)
        self._budget = budget

    def write(self, text: str) -> int:
        self._budget.check_time()
        if len(text) > self.limit:  # refused before the text is encoded to be measured
            raise OutputStreamLimitError("output stream limit reached", token=None)
        return super().write(text)


class BoundedRange(RangeLiteral):
    """``(a..b)`` refused when longer than the iteration limit, before any item exists."""

    __slots__ = ()

    def evaluate(self, context: RenderContext) -> range:
        found = super().evaluate(context)
        _refuse_long_range(found.stop - found.start, self)
        return found

    async def evaluate_async(self, context: RenderContext) -> range:  # pragma: no cover - never async
        found = await super().evaluate_async(context)
        _refuse_long_range(found.stop - found.start, self)
        return found


def _refuse_long_range(length: int, expression: Expression) -> None:
    if length > MAX_LOOP_ITERATIONS:
        raise SequenceLimitError(
            f"range limit reached: {expression} would hold {length} numbers, more than the "
            f"{MAX_LOOP_ITERATIONS} a template may loop over", token=expression.token)


def bound_ranges(template: BoundTemplate) -> None:
    """Make every range literal of a parsed template a BoundedRange, and refuse at once a
    range whose ends are both written as numbers and that is too long. The nodes and
    expressions are walked as python-liquid's own static analysis walks them. (python-liquid's
    parser builds RangeLiteral itself, wherever a range may stand: its class is swapped
    here, once per parsed template, rather than the library patched for every user of it.)"""
    static = RenderContext(template)
    nodes = list(template.nodes)
    while nodes:
        node = nodes.pop()
        for expression in _expressions(node.expressions()):
            if isinstance(expression, RangeLiteral):
                expression.__class__ = BoundedRange  # same slots: only the behaviour changes
                start, stop = expression.start, expression.stop
                if isinstance(start, IntegerLiteral) and isinstance(stop, IntegerLiteral):
                    _refuse_long_range(stop.value - start.value + 1, expression)
        nodes.extend(node.children(static, include_partials=False))


def _expressions(roots: Any) -> Iterator[Expression]:
    pending = list(roots)
    while pending:
        expression = pending.pop()
        yield expression
        pending.extend(expression.children())


# --- filters ------------------------------------------------------------------------------


def _text_size(value: object) -> int:
    return len(value) if isinstance(value, str) else len(str(value))


def _refuse_costly_arguments(name: str, left: object, args: tuple[Any, ...]) -> None:
    """The filters that multiply their input, judged from their arguments' sizes."""
    if name == "join" and isinstance(left, list | tuple | range) and len(left) > 1:
        separator = args[0] if args else " "
        if _text_size(separator) * (len(left) - 1) > MAX_FILTER_TEXT:
            raise _text_limit(name)
    if name == "replace" and isinstance(left, str) and len(args) >= 2:
        old, new = str(args[0]), _text_size(args[1])
        if new > len(old) and left.count(old) * (new - len(old)) + len(left) > MAX_FILTER_TEXT:
            raise _text_limit(name)


def _text_limit(name: str) -> SequenceLimitError:
    return SequenceLimitError(f"text limit reached: {name} would build more than "
                              f"{MAX_FILTER_TEXT} characters", token=None)


def _refuse_oversized_result(name: str, result: object) -> None:
    if isinstance(result, str):
        if len(result) > MAX_FILTER_TEXT:
            raise _text_limit(name)
    elif isinstance(result, list | tuple | dict | range) and len(result) > MAX_SEQUENCE_ITEMS:
        raise SequenceLimitError(f"sequence limit reached: {name} would build more than "
                                 f"{MAX_SEQUENCE_ITEMS} items", token=None)


def bounded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """The filter, charged to the render's time and refused past the size limits."""
    wants_context = getattr(func, "with_context", False)

    @wraps(func)
    def bounded(left: object, *args: Any, context: SandboxContext, **kwargs: Any) -> Any:
        context.budget.check_time()
        _refuse_costly_arguments(name, left, args)
        if wants_context:
            kwargs["context"] = context
        result = func(left, *args, **kwargs)
        _refuse_oversized_result(name, result)
        return result

    bounded.with_context = True  # type: ignore[attr-defined]
    bounded.__dict__.pop("filter_async", None)  # renders here are never async
    return bounded


class SandboxEnvironment(Environment):
    """The environment of tenant templates: python-liquid's limits (read from class
    variables) and every filter bounded."""

    loop_iteration_limit: ClassVar[int | None] = MAX_LOOP_ITERATIONS
    output_stream_limit: ClassVar[int | None] = MAX_OUTPUT_CHARS
    local_namespace_limit: ClassVar[int | None] = MAX_LOCALS_SIZE
    block_nesting_limit: ClassVar[int] = MAX_BLOCK_NESTING
    context_depth_limit: ClassVar[int] = MAX_CONTEXT_DEPTH

    def setup_tags_and_filters(self, *, extra: bool = False) -> None:
        super().setup_tags_and_filters(extra=extra)
        self.filters = {name: bounded_filter(name, func) for name, func in self.filters.items()}
