"""json and jsonb values read as Python through the process's decoder (db/platform/pool.py
json_loads: msgspec, with the standard library for what msgspec refuses), against the
real PostgreSQL."""

from __future__ import annotations

import math

from db.platform.pool import connection


def test_json_and_jsonb_values_read_as_the_standard_library_reads_them() -> None:
    with connection() as conn:
        row = conn.execute(
            "SELECT '{\"a\": [1, 2.5, null, true, \"é😀\"], \"b\": {\"c\": -0.0}}'::jsonb, "
            "'12345678901234567890123456789'::jsonb, '[\"x\", {\"y\": \"z\"}]'::json, "
            "'\"\\u00e9\"'::json").fetchone()
    assert row is not None
    assert row[0] == {"a": [1, 2.5, None, True, "é😀"], "b": {"c": -0.0}}
    assert row[1] == 12345678901234567890123456789
    assert row[2] == ["x", {"y": "z"}]
    assert row[3] == "é"


def test_a_number_msgspec_refuses_falls_back_to_the_standard_library() -> None:
    with connection() as conn:
        row = conn.execute("SELECT '[1e400]'::json, '1e400'::jsonb").fetchone()
    assert row is not None
    assert row[0] == [math.inf]  # json keeps the text: json.loads reads it as infinity
    assert row[1] == 10**400  # jsonb normalises it to a numeric, an integer
