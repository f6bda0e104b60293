"""JSON from outside (the events API's bodies, rule files, the builder's tree field), read so
that hostile input is refused with a plain message instead of costing a stack, a traceback
or a poisoned evaluation:
- nesting: a document nested deeper than MAX_JSON_DEPTH is refused before it is parsed, by
  a scan of its brackets (a parser, and every walk of the result, recurses once per level);
- numbers: only what a double-precision float can hold (is_finite_number, which validation
  applies at every path a number may take). An integer past ±1.8e308 cannot be made a
  float without OverflowError, and NaN and the infinities are not JSON at all; the
  standard library accepts all three, and turns 5,000 digits into a ValueError of its own.
"""

from __future__ import annotations

import json
import math
import re
import sys
from itertools import accumulate

from domain.errors import InvalidInput

__all__ = [
    "FLOAT_MAX",
    "MAX_JSON_DEPTH",
    "NUMBER_WORDS",
    "InvalidJson",
    "body_problem",
    "is_finite_number",
    "load_json",
    "nesting_depth_exceeds",
]

MAX_JSON_DEPTH = 32  # arrays and objects nested in one document (an event is about 6 deep)
FLOAT_MAX = sys.float_info.max  # the largest magnitude a number may have (about 1.8e308)
NUMBER_WORDS = "a number must be finite and between -1.8e308 and 1.8e308 (what a double holds)"
# Digits of an integer literal that are certainly too large for a double: longer ones are
# not handed to int() (Python itself refuses past 4,300 digits, with a ValueError).
_MAX_INT_DIGITS = 309

# JSON strings (escapes included), removed before the brackets are counted.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 to open, -1 (as a signed byte) to close
# NaN and the infinities as some encoders write them (outside strings).
_NOT_FINITE = re.compile(rb"-?\b(?:NaN|Infinity)\b")


class InvalidJson(InvalidInput):
    """A JSON document refused as it was read: malformed, nested too deeply, or holding a
    number no double can hold. The message names what is wrong, for a person."""


def is_finite_number(value: object) -> bool:
    """Whether a number (not a boolean) is one a double holds: finite, within ±1.8e308.
    Checked without float() on an integer, which raises OverflowError past that."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    return -FLOAT_MAX <= value <= FLOAT_MAX  # exact: Python compares an int with a float exactly


def _outside_strings(data: bytes) -> bytes:
    return _STRING.sub(b"", data)


def _deeper_than(bare: bytes, limit: int) -> bool:
    """Whether brackets nest deeper than ``limit``: C-speed passes over the bytes and over
    the brackets (translate, accumulate, max), no recursion and no Python loop."""
    if bare.count(b"[") + bare.count(b"{") <= limit:
        return False  # not even that many opening brackets
    steps = memoryview(bare.translate(None, _NOT_BRACKETS).translate(_DEPTH)).cast("b")
    return max(accumulate(steps), default=0) > limit


def nesting_depth_exceeds(document: str | bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a JSON document nests arrays and objects deeper than ``limit``, judged from
    its brackets outside strings, without parsing it. A malformed document may be judged on
    its brackets alone; it is refused anyway."""
    data = document.encode("utf-8", "surrogatepass") if isinstance(document, str) else document
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    return _deeper_than(_outside_strings(data), limit)


def body_problem(body: bytes, limit: int = MAX_JSON_DEPTH) -> str | None:
    """Why a request body is refused before it is parsed, in words (None: parse it): nested
    deeper than ``limit``, or a NaN or an infinity written where a number goes (parsers say
    "invalid character" of those, which helps nobody)."""
    bare = _outside_strings(body)
    if _deeper_than(bare, limit):
        return f"the body nests arrays and objects more than {limit} deep"
    found = _NOT_FINITE.search(bare)
    if found is not None:
        return f"{found.group().decode()} is not a JSON number: {NUMBER_WORDS}"
    return None


def _int_or_infinity(digits: str) -> int | float:
    """An integer literal, or an infinity for one so long that int() would refuse it (past
    4,300 digits) or take its time: validation then names its path (is_finite_number)."""
    if len(digits.lstrip("-")) > _MAX_INT_DIGITS:
        return -math.inf if digits.startswith("-") else math.inf
    return int(digits)


def load_json(text: str | bytes, what: str = "the document") -> object:
    """A JSON document, or InvalidJson saying what is wrong with it (``what`` names it in
    the message: "rules.json", "the conditions"). Numbers no double holds are read as they
    are (NaN, the infinities, huge integers as infinities): the validation of what was read
    refuses each at its path, with NUMBER_WORDS."""
    if nesting_depth_exceeds(text):
        raise InvalidJson(f"{what} nests arrays and objects more than {MAX_JSON_DEPTH} deep")
    try:
        return json.loads(text, parse_int=_int_or_infinity)
    except json.JSONDecodeError as error:
        raise InvalidJson(f"{what} is not JSON: {error.msg} at line {error.lineno}, "
                          f"column {error.colno}") from None
    except (RecursionError, UnicodeDecodeError, ValueError) as error:
        raise InvalidJson(f"{what} is not JSON that can be read ({type(error).__name__})") from None
