-- The canonical encoding's helpers declared no stricter than their bodies (to_json and
-- to_char are STABLE), so that PostgreSQL inlines them into the evidence triggers' and the
-- sealer's queries instead of calling a function per value (0050 declared them IMMUTABLE).
CREATE OR REPLACE FUNCTION control.ev_text(v text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT coalesce(to_json(v)::text, 'null') $$;

CREATE OR REPLACE FUNCTION control.ev_time(v timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce('"' || to_char(v AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '"', 'null') $$;

CREATE OR REPLACE FUNCTION control.ev_date(v date) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce('"' || to_char(v, 'YYYY-MM-DD') || '"', 'null') $$;
