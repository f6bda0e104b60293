-- Obligations: time-trigger rules over date facts (db/rules/time_rules.py) and the tenant's
-- working calendar for business-day offsets (db/rules/calendar.py).

-- The tenant's working week (ISO weekdays, 1 = Monday) and holiday dates: one row.
CREATE TABLE working_calendar (
    id           boolean PRIMARY KEY DEFAULT true CHECK (id),  -- at most one row
    working_days smallint[] NOT NULL DEFAULT '{1,2,3,4,5}'
                 CHECK (cardinality(working_days) BETWEEN 1 AND 7
                        AND working_days <@ '{1,2,3,4,5,6,7}'::smallint[]),
    holidays     date[] NOT NULL DEFAULT '{}' CHECK (cardinality(holidays) <= 1000),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
INSERT INTO working_calendar DEFAULT VALUES;

-- A date fact's value as a date: an ISO 'YYYY-MM-DD' string that names a real day, else
-- NULL (a malformed value is no due date, never an error that stops a tenant's scan).
-- Built with make_date, not a cast, so that it is IMMUTABLE (a cast of text to date depends
-- on DateStyle) and can be indexed.
CREATE FUNCTION iso_date_or_null(value text) RETURNS date
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN value ~ '^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$'
             AND substr(value, 1, 4) <> '0000'
             AND substr(value, 9, 2)::int <= extract(day FROM
                 make_date(substr(value, 1, 4)::int, substr(value, 6, 2)::int, 1)
                 + interval '1 month' - interval '1 day')
        THEN make_date(substr(value, 1, 4)::int, substr(value, 6, 2)::int, substr(value, 9, 2)::int)
    END
$$;

-- The scan's candidates of a due-date rule: the subjects whose date field is at most the
-- horizon (the latest due date with a window begun), found by field name and date.
CREATE INDEX subject_fields_due ON subject_fields (name, iso_date_or_null(value #>> '{}'))
    WHERE jsonb_typeof(value) = 'string';

-- A moved due date cancels the old date's notices that are still waiting: those not yet
-- prepared (ledger_rule_unprepared) and those whose email is still waiting (below).
CREATE INDEX deliveries_waiting ON notification_deliveries (notification_id)
    WHERE status IN ('pending', 'deferred', 'batched');
