-- Who changed what: one row per state-changing action of a person, an API key, the CLI or
-- the system, written in the same transaction as the change (db/evidence/audit.py
-- record_audit). Rows are never changed or removed (the triggers refuse it); id orders
-- them, so a later hash chain over the evidence can take them in that order.
CREATE TABLE audit_log (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    occurred_at    timestamptz NOT NULL DEFAULT now(),
    actor_kind     text NOT NULL
                   CHECK (actor_kind IN ('user', 'api_key', 'cli', 'system', 'anonymous')),
    actor_user_id  bigint,  -- no foreign key: the row outlives whatever it names
    actor_label    text NOT NULL,  -- an email, a key's label and prefix, cli:<os user>
    client_address text,
    action         text NOT NULL,  -- e.g. client.create, member.role, sign_in.refused
    object_kind    text NOT NULL,
    object_id      text,
    before         jsonb,
    after          jsonb
);
-- The page lists the newest first, filtered by action, actor or object.
CREATE INDEX audit_log_newest ON audit_log (id DESC);
CREATE INDEX audit_log_object ON audit_log (object_kind, object_id, id DESC);
CREATE INDEX audit_log_actor ON audit_log (actor_label, id DESC);

CREATE TRIGGER audit_log_append_only
    BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION control.refuse_audit_change();
CREATE TRIGGER audit_log_never_truncated
    BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION control.refuse_audit_change();
