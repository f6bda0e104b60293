-- The audit log's rows join the evidence chain (kind 'audit'; docs/design/evidence.md, "What
-- an audit row chains"). Its personal fields (actor_label, client_address) are chained as
-- salted digests (evidence_personal). Its before/after JSON may name anybody, and erasing a
-- person rewrites it in place (control migration 0041), so the chain records it as a digest
-- salted per row (evidence_salts person 'audit_log:<id>'): an edit is detected while the salt
-- lives; erasing a person deletes the salts of the rows whose JSON named them, and the chain
-- still verifies. The other fields are chained as they are.

-- A value's digest under the salt of ``salt_key`` (made on first use), as evidence_personal
-- renders it: a JSON string "sha256:<hex>".
CREATE FUNCTION evidence_salted(salt_key text, v text) RETURNS text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE s bytea;
BEGIN
    IF v IS NULL THEN RETURN 'null'; END IF;
    SELECT salt INTO s FROM evidence_salts WHERE person = salt_key;
    IF s IS NULL THEN
        INSERT INTO evidence_salts (person) VALUES (salt_key) ON CONFLICT DO NOTHING;
        SELECT salt INTO s FROM evidence_salts WHERE person = salt_key;
    END IF;
    RETURN '"sha256:' || encode(sha256(s || convert_to(v, 'UTF8')), 'hex') || '"';
END
$$;

-- before and after as one text: db/evidence/verify.py renders them the same way.
CREATE FUNCTION evidence_audit_changes(r audit_log) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(r.before::text, 'null') || ' ' || coalesce(r.after::text, 'null') $$;

CREATE FUNCTION evidence_audit(r audit_log) RETURNS text
LANGUAGE sql VOLATILE SET search_path FROM CURRENT AS $$
    SELECT '{"action":' || control.ev_text(r.action) || ',"actor_kind":' || control.ev_text(r.actor_kind)
        || ',"actor_label":' || evidence_personal(r.actor_label)
        || ',"actor_user_id":' || control.ev_int(r.actor_user_id)
        || ',"changes":' || evidence_salted('audit_log:' || r.id, evidence_audit_changes(r))
        || ',"client_address":' || evidence_personal(r.client_address)
        || ',"id":' || control.ev_int(r.id) || ',"object_id":' || control.ev_text(r.object_id)
        || ',"object_kind":' || control.ev_text(r.object_kind)
        || ',"occurred_at":' || control.ev_time(r.occurred_at) || '}' $$;

CREATE FUNCTION evidence_on_audit_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO evidence_pending (kind, ref, payload)
    SELECT 'audit', n.id::text, evidence_audit(n) FROM new_rows n ORDER BY n.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER evidence_audit AFTER INSERT ON audit_log
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION evidence_on_audit_insert();

-- The audit rows found when this migration ran, as they stand.
INSERT INTO evidence_pending (kind, ref, payload)
SELECT 'audit', id::text, evidence_audit(a) FROM audit_log a ORDER BY id;
