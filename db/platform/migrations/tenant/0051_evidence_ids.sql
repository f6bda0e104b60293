-- Claims, deliveries and attempts (the hot paths: a scan writes thousands in one statement)
-- record only the ids an INSERT wrote, one small row per statement in evidence_pending; the
-- sealer renders their payloads from the rows when it seals them. Rendering and storing a
-- payload per claim in the writer's transaction cost about as much as writing the claim
-- (docs/benchmarks/evidence.md). Moves, rule versions and provider events still record their
-- payload at once: the value a move went to must be the one chained.
-- IF NOT EXISTS, CREATE OR REPLACE: a development database migrated by an unmerged draft of 0050
-- already has them.
ALTER TABLE evidence_pending ADD COLUMN IF NOT EXISTS ids bigint[];  -- the rows an INSERT wrote, in id order

-- A pending entry's facts: itself, or one fact per row id, rendered from the row as it is
-- now (a row deleted before its seal is chained as missing, and verify names it).
CREATE OR REPLACE FUNCTION evidence_facts(fact_kind text, fact_ref text, fact_payload text, row_ids bigint[])
RETURNS TABLE (ref text, payload text)
LANGUAGE plpgsql STABLE SET search_path FROM CURRENT AS $$
BEGIN
    IF row_ids IS NULL THEN
        RETURN QUERY SELECT fact_ref, fact_payload;
    ELSIF fact_kind = 'claim' THEN
        RETURN QUERY SELECT u.id::text, coalesce(evidence_claim(r), '{"id":' || u.id || ',"missing_at_seal":true}')
        FROM unnest(row_ids) u (id) LEFT JOIN notification_ledger r ON r.id = u.id ORDER BY u.id;
    ELSIF fact_kind = 'delivery' THEN
        RETURN QUERY SELECT u.id::text, coalesce(evidence_delivery(r), '{"id":' || u.id || ',"missing_at_seal":true}')
        FROM unnest(row_ids) u (id) LEFT JOIN notification_deliveries r ON r.id = u.id ORDER BY u.id;
    ELSIF fact_kind = 'attempt' THEN
        RETURN QUERY SELECT u.id::text, coalesce(evidence_attempt(r), '{"id":' || u.id || ',"missing_at_seal":true}')
        FROM unnest(row_ids) u (id) LEFT JOIN delivery_attempts r ON r.id = u.id ORDER BY u.id;
    ELSE
        RAISE EXCEPTION 'evidence: % facts are not recorded by ids', fact_kind;
    END IF;
END
$$;

-- Seal up to max_rows pending entries into the chain, in pending order, under the head's
-- lock (a second sealer waits, then finds them gone). Returns how many facts were sealed.
CREATE OR REPLACE FUNCTION evidence_seal(max_rows integer) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    head_seq bigint; head_hash text; p record; f record;
    taken bigint[] := '{}'; seqs bigint[] := '{}'; kinds text[] := '{}'; refs text[] := '{}';
    payloads text[] := '{}'; prevs text[] := '{}'; hashes text[] := '{}';
BEGIN
    SELECT seq, hash INTO head_seq, head_hash FROM evidence_head FOR UPDATE;
    FOR p IN SELECT e.id, e.kind, e.ref, e.payload, e.ids AS rows FROM evidence_pending e
             ORDER BY e.id LIMIT max_rows LOOP
        taken := taken || p.id;
        FOR f IN SELECT * FROM evidence_facts(p.kind, p.ref, p.payload, p.rows) LOOP
            head_seq := head_seq + 1;
            seqs := seqs || head_seq; kinds := kinds || p.kind;
            refs := refs || f.ref; payloads := payloads || f.payload; prevs := prevs || head_hash;
            head_hash := encode(sha256(convert_to(
                head_hash || '|' || head_seq || '|' || p.kind || '|' || f.ref || '|' || f.payload,
                'UTF8')), 'hex');
            hashes := hashes || head_hash;
        END LOOP;
    END LOOP;
    IF cardinality(taken) = 0 THEN RETURN 0; END IF;
    INSERT INTO evidence_chain (seq, kind, ref, payload, prev_hash, hash)
    SELECT * FROM unnest(seqs, kinds, refs, payloads, prevs, hashes);
    DELETE FROM evidence_pending WHERE id = ANY(taken);
    UPDATE evidence_head SET seq = head_seq, hash = head_hash, updated_at = now();
    RETURN cardinality(seqs);
END
$$;

-- Inserts: one statement-level trigger per table, reading its transition table. Claims,
-- deliveries and attempts record the ids only; the sealer renders them.
CREATE OR REPLACE FUNCTION evidence_on_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_TABLE_NAME = 'notification_ledger' THEN
        INSERT INTO evidence_pending (kind, ref, payload, ids)
        SELECT 'claim', '', '', array_agg(id ORDER BY id) FROM new_rows HAVING count(*) > 0;
    ELSIF TG_TABLE_NAME = 'notification_deliveries' THEN
        INSERT INTO evidence_pending (kind, ref, payload, ids)
        SELECT 'delivery', '', '', array_agg(id ORDER BY id) FROM new_rows HAVING count(*) > 0;
    ELSIF TG_TABLE_NAME = 'delivery_attempts' THEN
        INSERT INTO evidence_pending (kind, ref, payload, ids)
        SELECT 'attempt', '', '', array_agg(id ORDER BY id) FROM new_rows HAVING count(*) > 0;
    ELSIF TG_TABLE_NAME = 'delivery_events' THEN
        INSERT INTO evidence_pending (kind, ref, payload)
        SELECT 'provider_event', n.id::text, evidence_provider_event(n) FROM new_rows n ORDER BY n.id;
    ELSIF TG_TABLE_NAME = 'rule_versions' THEN
        INSERT INTO evidence_pending (kind, ref, payload)
        SELECT 'rule_version', n.rule_id || '/' || n.version, evidence_rule_version(n)
        FROM new_rows n ORDER BY n.rule_id, n.version;
    END IF;
    RETURN NULL;
END
$$;
