"""Hostile values for any field: the inputs that broke parsers before (digits that are not
ASCII, non-ASCII tokens, numbers past a bigint, impossible dates), and any text at all."""

from __future__ import annotations

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
]

# Letters, digits of every script, marks, symbols, controls: never a lone surrogate, which
# no HTTP client can send.
ANY_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=60)

# Numbers as people and scripts write them: other scripts' digits, superscripts, fractions.
NUMERALS = st.text(st.characters(categories=["Nd", "No", "Nl"]), min_size=1, max_size=4)

FIELD = st.one_of(st.sampled_from(TRICKY), ANY_TEXT, NUMERALS, st.integers().map(str),
                  st.from_regex(r"[0-9]{1,30}", fullmatch=True))
