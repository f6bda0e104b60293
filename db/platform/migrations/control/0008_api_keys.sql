-- Events API keys: a display prefix (the first characters of the key, never enough to use
-- it) so an admin can tell keys apart in a list, and when each was last used (updated at
-- most once a minute per key: a busy key must not write a row per request).
ALTER TABLE control.api_keys
    ADD COLUMN prefix       text NOT NULL DEFAULT '',
    ADD COLUMN last_used_at timestamptz;
ALTER TABLE control.api_keys ADD CONSTRAINT api_keys_label_check
    CHECK (length(btrim(label)) BETWEEN 1 AND 200);
CREATE INDEX api_keys_by_tenant ON control.api_keys (tenant_id, created_at);
