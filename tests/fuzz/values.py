"""Hostile values for any field: the inputs that broke parsers before (digits that are not
ASCII, non-ASCII tokens, numbers past a bigint or a double, impossible dates, carriage returns
and line feeds before a formula, JSON nested far too deep), and any text at all."""

from __future__ import annotations

import json

from hypothesis import strategies as st

TRICKY = [
    "", " ", "0", "-1", "1", "\u00b2", "\u0663", "\uff11\uff12", "1e309", "NaN", "inf", "+1", "0x10",
    "1_000", "\u0661\u0662\u0663",
    "99999999999999999999", "9223372036854775808", "-9223372036854775809", str(2**63 - 1),
    "2027-02-30", "2027-13-01", "0000-01-01", "9999-12-31", "2027-01-01T00:00:00",
    "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "25:00", "23:60", "-00:01", "07:30",
    "\x00", "\ufffd", "\uffff", "%00", "%ff", "..", "../../etc/passwd", "//evil.example", "/\\evil.example",
    "<script>alert(1)</script>", "' OR 1=1 --", "😀", "a" * 5000, "Europe/London", "Mars/Olympus",
    "admin", "member", "client_user", "owner", "instant", "off", "daily_digest", "email", "inbox",
    "true", "false", "null", "[]", "{}", "a.b", "é.é",
    "1" + "0" * 400, "-" + "9" * 5000, "1e999", "-Infinity", "Infinity",
    "\r", "\n", "\r\n", "CASE-77\r=HYPERLINK(\"http://evil.example\",\"x\")", "a\n@SUM(1)", "x\r\n-1+1",
    "[" * 200 + "]" * 200, '{"a":' * 100 + "1" + "}" * 100, "{{ (1..10000000) | join }}",
]

# Letters, digits of every script, marks, symbols, controls: never a lone surrogate, which
# no HTTP client can send.
PLAIN_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=60)
LINE_BREAK = st.sampled_from(["\r", "\n", "\r\n"])
FORMULA = st.sampled_from(["=", "+", "-", "@", "\t", "\r"])
# Any text, often with a line break in it followed by a formula character (the CSV attack).
ANY_TEXT = PLAIN_TEXT | st.builds(lambda a, br, f, b: a + br + f + b,
                                  PLAIN_TEXT, LINE_BREAK, FORMULA, PLAIN_TEXT)
# Integers past a bigint and past a double (1 followed by 400 zeros: float() raises on it).
HUGE_INTEGERS = st.integers(min_value=2**63, max_value=10**420) | st.integers(max_value=-(10**308),
                                                                              min_value=-(10**420))


def nested(depth: int, leaf: object = 1) -> object:
    """A value nested ``depth`` arrays deep (alternating with objects)."""
    value: object = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"a": value}
    return value


# JSON nested from a little to far past what the events API and the rules take (32).
DEEP_JSON = st.integers(min_value=1, max_value=400).map(nested)

# Numbers as people and scripts write them: other scripts' digits, superscripts, fractions.
NUMERALS = st.text(st.characters(categories=["Nd", "No", "Nl"]), min_size=1, max_size=4)

FIELD = st.one_of(st.sampled_from(TRICKY), ANY_TEXT, NUMERALS, st.integers().map(str),
                  st.from_regex(r"[0-9]{1,30}", fullmatch=True), HUGE_INTEGERS.map(str),
                  DEEP_JSON.map(json.dumps))
