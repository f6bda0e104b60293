-- Evidence that proves itself (docs/design/evidence.md): the canonical encoding's helpers,
-- shared by every tenant schema's fact triggers, and the checkpoint signing keys.

-- Each helper renders one value as the canonical JSON value (tocsin domain/evidence/canonical.py
-- renders the same bytes in Python; tests/integration/test_evidence_chain.py proves they agree).
-- Text: a JSON string, escaped as PostgreSQL's to_json escapes it (", \, \b \f \n \r \t,
-- other control characters as \u00xx, everything else as is, UTF-8).
CREATE FUNCTION control.ev_text(v text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT coalesce(to_json(v)::text, 'null') $$;

-- Integers: decimal digits.
CREATE FUNCTION control.ev_int(v bigint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT coalesce(v::text, 'null') $$;

CREATE FUNCTION control.ev_bool(v boolean) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN v IS NULL THEN 'null' WHEN v THEN 'true' ELSE 'false' END $$;

-- Instants: UTC, microseconds, "2026-12-04T11:47:57.123456Z".
CREATE FUNCTION control.ev_time(v timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce('"' || to_char(v AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '"', 'null') $$;

-- Calendar dates: "2026-12-04".
CREATE FUNCTION control.ev_date(v date) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce('"' || to_char(v, 'YYYY-MM-DD') || '"', 'null') $$;

-- The public keys that ever signed a checkpoint, by key id (the first 16 hex digits of the
-- SHA-256 of the raw public key). A key is never deleted: a rotated secret signs nothing
-- new, and the checkpoints it signed still verify against its public key here.
CREATE TABLE control.evidence_keys (
    key_id        text PRIMARY KEY CHECK (key_id ~ '^[0-9a-f]{16}$'),
    public_key    text NOT NULL UNIQUE,  -- raw Ed25519 public key, hex
    first_used_at timestamptz NOT NULL DEFAULT now()
);
