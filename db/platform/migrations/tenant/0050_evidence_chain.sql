-- The evidence chain (docs/design/evidence.md). Its functions keep this schema as their
-- search_path (SET search_path FROM CURRENT: the migration runs scoped to the schema), so a
-- writer naming its tables by schema, with another search_path, still writes its facts here.
-- Every fact that must never change is appended, in the transaction that writes it, to evidence_pending with its canonical
-- encoding; the sealer (db/evidence/chain.py seal_pending) links pending facts into
-- evidence_chain one by one under the tenant's chain head, so concurrent writers never
-- contend for the head and the chain can never fork. Mutable status columns are not
-- hashed: each move is a fact of its own.

-- Salts of personal values (GDPR article 17): a fact hashes sha256(salt || value), never the
-- value; erasing a person deletes their salt with their data, and the chain still verifies.
CREATE TABLE evidence_salts (
    person text PRIMARY KEY,  -- the personal value, lower-cased (an address, a name)
    salt   bytea NOT NULL DEFAULT uuid_send(gen_random_uuid())  -- 122 random bits
);

-- A personal value as the chain records it: "sha256:<hex>" of its salt and the value.
CREATE FUNCTION evidence_personal(v text) RETURNS text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE s bytea;
BEGIN
    IF v IS NULL THEN RETURN 'null'; END IF;
    SELECT salt INTO s FROM evidence_salts WHERE person = lower(v);
    IF s IS NULL THEN
        INSERT INTO evidence_salts (person) VALUES (lower(v)) ON CONFLICT DO NOTHING;
        SELECT salt INTO s FROM evidence_salts WHERE person = lower(v);
    END IF;
    RETURN '"sha256:' || encode(sha256(s || convert_to(v, 'UTF8')), 'hex') || '"';
END
$$;

-- Facts written and not sealed yet (normally only those of the last seconds).
CREATE TABLE evidence_pending (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind    text NOT NULL,
    ref     text NOT NULL,   -- the fact's row: its id, or rule_id/version
    payload text NOT NULL    -- canonical JSON (sorted keys, no spaces)
);

-- The chain: hash = sha256(prev_hash | seq | kind | ref | payload), see evidence.md.
CREATE TABLE evidence_chain (
    seq       bigint PRIMARY KEY CHECK (seq > 0),
    kind      text NOT NULL,
    ref       text NOT NULL,
    payload   text NOT NULL,
    prev_hash text NOT NULL,
    hash      text NOT NULL,
    sealed_at timestamptz NOT NULL DEFAULT now()
);

-- The head: the last sequence and hash; the row the sealer locks to append.
CREATE TABLE evidence_head (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    seq        bigint NOT NULL DEFAULT 0,
    hash       text NOT NULL DEFAULT repeat('0', 64),
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO evidence_head DEFAULT VALUES;

-- Seal up to max_rows pending facts into the chain, in pending order, under the head's
-- lock (a second sealer waits, then finds them gone). Returns how many were sealed.
CREATE FUNCTION evidence_seal(max_rows integer) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    head_seq bigint; head_hash text; p record;
    ids bigint[] := '{}'; seqs bigint[] := '{}'; kinds text[] := '{}'; refs text[] := '{}';
    payloads text[] := '{}'; prevs text[] := '{}'; hashes text[] := '{}';
BEGIN
    SELECT seq, hash INTO head_seq, head_hash FROM evidence_head FOR UPDATE;
    FOR p IN SELECT id, kind, ref, payload FROM evidence_pending ORDER BY id LIMIT max_rows LOOP
        head_seq := head_seq + 1;
        ids := ids || p.id; seqs := seqs || head_seq; kinds := kinds || p.kind;
        refs := refs || p.ref; payloads := payloads || p.payload; prevs := prevs || head_hash;
        head_hash := encode(sha256(convert_to(
            head_hash || '|' || head_seq || '|' || p.kind || '|' || p.ref || '|' || p.payload,
            'UTF8')), 'hex');
        hashes := hashes || head_hash;
    END LOOP;
    IF cardinality(ids) = 0 THEN RETURN 0; END IF;
    INSERT INTO evidence_chain (seq, kind, ref, payload, prev_hash, hash)
    SELECT * FROM unnest(seqs, kinds, refs, payloads, prevs, hashes);
    DELETE FROM evidence_pending WHERE id = ANY(ids);
    UPDATE evidence_head SET seq = head_seq, hash = head_hash, updated_at = now();
    RETURN cardinality(ids);
END
$$;

-- The canonical encoding of each fact kind, from its row. Keys in sorted order.
CREATE FUNCTION evidence_claim(r notification_ledger) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"claimed_at":' || control.ev_time(r.claimed_at) || ',"due_on":' || control.ev_date(r.due_on)
        || ',"event_id":' || control.ev_int(r.event_id) || ',"id":' || control.ev_int(r.id)
        || ',"local_date":' || control.ev_date(r.local_date) || ',"rule":' || control.ev_text(r.rule)
        || ',"rule_id":' || control.ev_int(r.rule_id) || ',"rule_version":' || control.ev_int(r.rule_version)
        || ',"status":' || control.ev_text(r.status) || ',"status_reason":' || control.ev_text(r.status_reason)
        || ',"subject_id":' || control.ev_int(r.subject_id) || ',"subject_kind":' || control.ev_text(r.subject_kind)
        || ',"threshold":' || control.ev_text(r.threshold) || '}' $$;

CREATE FUNCTION evidence_claim_status(r notification_ledger) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"id":' || control.ev_int(r.id) || ',"status":' || control.ev_text(r.status)
        || ',"status_reason":' || control.ev_text(r.status_reason) || '}' $$;

CREATE FUNCTION evidence_delivered(r notification_ledger) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"delivered_at":' || control.ev_time(r.delivered_at) || ',"id":' || control.ev_int(r.id) || '}' $$;

CREATE FUNCTION evidence_acknowledged(r notification_ledger) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"acknowledged_at":' || control.ev_time(r.acknowledged_at) || ',"acknowledged_by":'
        || control.ev_int(r.acknowledged_by) || ',"id":' || control.ev_int(r.id) || '}' $$;

CREATE FUNCTION evidence_delivery(r notification_deliveries) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"channel":' || control.ev_text(r.channel) || ',"created_at":' || control.ev_time(r.created_at)
        || ',"digest_id":' || control.ev_int(r.digest_id) || ',"id":' || control.ev_int(r.id)
        || ',"notification_id":' || control.ev_int(r.notification_id)
        || ',"status":' || control.ev_text(r.status) || '}' $$;

CREATE FUNCTION evidence_delivery_status(r notification_deliveries) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"id":' || control.ev_int(r.id) || ',"status":' || control.ev_text(r.status) || '}' $$;

CREATE FUNCTION evidence_attempt(r delivery_attempts) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"attempt_no":' || control.ev_int(r.attempt_no) || ',"claim_token":' || control.ev_text(r.claim_token::text)
        || ',"delivery_id":' || control.ev_int(r.delivery_id) || ',"id":' || control.ev_int(r.id)
        || ',"started_at":' || control.ev_time(r.started_at) || '}' $$;

CREATE FUNCTION evidence_attempt_outcome(r delivery_attempts) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"ended_at":' || control.ev_time(r.ended_at) || ',"error_class":' || control.ev_text(r.error_class)
        || ',"id":' || control.ev_int(r.id) || ',"outcome":' || control.ev_text(r.outcome)
        || ',"provider_message_id":' || control.ev_text(r.provider_message_id) || '}' $$;

CREATE FUNCTION evidence_provider_event(r delivery_events) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"delivery_id":' || control.ev_int(r.delivery_id) || ',"event_type":' || control.ev_text(r.event_type)
        || ',"id":' || control.ev_int(r.id) || ',"occurred_at":' || control.ev_time(r.occurred_at)
        || ',"provider_message_id":' || control.ev_text(r.provider_message_id) || '}' $$;

CREATE FUNCTION evidence_rule_version(r rule_versions) RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT '{"changed_at":' || control.ev_time(r.changed_at) || ',"changed_by":' || evidence_personal(r.changed_by)
        || ',"definition_sha256":' || control.ev_text(encode(sha256(convert_to(r.definition::text, 'UTF8')), 'hex'))
        || ',"enabled":' || control.ev_bool(r.enabled) || ',"rule_id":' || control.ev_int(r.rule_id)
        || ',"summary":' || control.ev_text(r.summary) || ',"version":' || control.ev_int(r.version) || '}' $$;

-- Inserts: one statement-level trigger per table, reading its transition table (a scan's
-- thousand claims cost one INSERT ... SELECT, not a thousand calls).
CREATE FUNCTION evidence_on_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_TABLE_NAME = 'notification_ledger' THEN
        INSERT INTO evidence_pending (kind, ref, payload)
        SELECT 'claim', n.id::text, evidence_claim(n) FROM new_rows n ORDER BY n.id;
    ELSIF TG_TABLE_NAME = 'notification_deliveries' THEN
        INSERT INTO evidence_pending (kind, ref, payload)
        SELECT 'delivery', n.id::text, evidence_delivery(n) FROM new_rows n ORDER BY n.id;
    ELSIF TG_TABLE_NAME = 'delivery_attempts' THEN
        INSERT INTO evidence_pending (kind, ref, payload)
        SELECT 'attempt', n.id::text, evidence_attempt(n) FROM new_rows n ORDER BY n.id;
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

CREATE TRIGGER evidence_claims AFTER INSERT ON notification_ledger
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION evidence_on_insert();
CREATE TRIGGER evidence_deliveries AFTER INSERT ON notification_deliveries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION evidence_on_insert();
CREATE TRIGGER evidence_attempts AFTER INSERT ON delivery_attempts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION evidence_on_insert();
CREATE TRIGGER evidence_provider_events AFTER INSERT ON delivery_events
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION evidence_on_insert();
CREATE TRIGGER evidence_rule_versions AFTER INSERT ON rule_versions
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION evidence_on_insert();

-- Moves: row-level triggers whose WHEN clause PostgreSQL checks before calling anything, so
-- an update that moves nothing the chain records (a lease, a counter) costs nothing.
CREATE FUNCTION evidence_on_move() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO evidence_pending (kind, ref, payload)
    SELECT TG_ARGV[0], NEW.id::text, CASE TG_ARGV[0]
        WHEN 'claim_status' THEN evidence_claim_status(NEW)
        WHEN 'delivered' THEN evidence_delivered(NEW)
        WHEN 'acknowledged' THEN evidence_acknowledged(NEW)
    END;
    RETURN NULL;
END
$$;

CREATE FUNCTION evidence_on_delivery_move() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO evidence_pending (kind, ref, payload)
    VALUES ('delivery_status', NEW.id::text, evidence_delivery_status(NEW));
    RETURN NULL;
END
$$;

CREATE FUNCTION evidence_on_attempt_outcome() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO evidence_pending (kind, ref, payload)
    VALUES ('attempt_outcome', NEW.id::text, evidence_attempt_outcome(NEW));
    RETURN NULL;
END
$$;

CREATE TRIGGER evidence_claim_status AFTER UPDATE OF status, status_reason ON notification_ledger
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.status_reason IS DISTINCT FROM NEW.status_reason)
    EXECUTE FUNCTION evidence_on_move('claim_status');
CREATE TRIGGER evidence_delivered AFTER UPDATE OF delivered_at ON notification_ledger
    FOR EACH ROW WHEN (OLD.delivered_at IS DISTINCT FROM NEW.delivered_at)
    EXECUTE FUNCTION evidence_on_move('delivered');
CREATE TRIGGER evidence_acknowledged AFTER UPDATE OF acknowledged_at, acknowledged_by ON notification_ledger
    FOR EACH ROW WHEN (OLD.acknowledged_at IS DISTINCT FROM NEW.acknowledged_at
                       OR OLD.acknowledged_by IS DISTINCT FROM NEW.acknowledged_by)
    EXECUTE FUNCTION evidence_on_move('acknowledged');
CREATE TRIGGER evidence_delivery_status AFTER UPDATE OF status ON notification_deliveries
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION evidence_on_delivery_move();
CREATE TRIGGER evidence_attempt_outcome AFTER UPDATE OF outcome, ended_at, error_class, provider_message_id
    ON delivery_attempts
    FOR EACH ROW WHEN (OLD.outcome IS DISTINCT FROM NEW.outcome OR OLD.ended_at IS DISTINCT FROM NEW.ended_at
                       OR OLD.error_class IS DISTINCT FROM NEW.error_class
                       OR OLD.provider_message_id IS DISTINCT FROM NEW.provider_message_id)
    EXECUTE FUNCTION evidence_on_attempt_outcome();

-- The history found when this migration ran: its facts as they stand, first in the chain.
INSERT INTO evidence_pending (kind, ref, payload)
SELECT 'rule_version', rule_id || '/' || version, evidence_rule_version(v)
FROM rule_versions v ORDER BY rule_id, version;
INSERT INTO evidence_pending (kind, ref, payload)
SELECT 'claim', id::text, evidence_claim(l) FROM notification_ledger l ORDER BY id;
INSERT INTO evidence_pending (kind, ref, payload)
SELECT 'delivered', id::text, evidence_delivered(l) FROM notification_ledger l
WHERE delivered_at IS NOT NULL ORDER BY id;
INSERT INTO evidence_pending (kind, ref, payload)
SELECT 'acknowledged', id::text, evidence_acknowledged(l) FROM notification_ledger l
WHERE acknowledged_at IS NOT NULL ORDER BY id;
INSERT INTO evidence_pending (kind, ref, payload)
SELECT 'delivery', id::text, evidence_delivery(d) FROM notification_deliveries d ORDER BY id;
INSERT INTO evidence_pending (kind, ref, payload)
SELECT 'attempt', id::text, evidence_attempt(a) FROM delivery_attempts a ORDER BY id;
INSERT INTO evidence_pending (kind, ref, payload)
SELECT 'attempt_outcome', id::text, evidence_attempt_outcome(a) FROM delivery_attempts a
WHERE outcome IS NOT NULL ORDER BY id;
INSERT INTO evidence_pending (kind, ref, payload)
SELECT 'provider_event', id::text, evidence_provider_event(e) FROM delivery_events e ORDER BY id;

-- Periodic verification results (the evidence page shows the last) and signed checkpoints.
CREATE TABLE evidence_verifications (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    verified_at timestamptz NOT NULL DEFAULT now(),
    records     bigint NOT NULL,
    head_seq    bigint NOT NULL,
    ok          boolean NOT NULL,
    first_break text,     -- what verify named, when not ok
    break_key   text,     -- sequence, table and id of the first break: one alert per break
    seconds     double precision NOT NULL
);

CREATE TABLE evidence_checkpoints (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    seq        bigint NOT NULL,
    head_hash  text NOT NULL,
    signed_at  timestamptz NOT NULL,
    reason     text NOT NULL CHECK (reason IN ('periodic', 'export', 'manual')),
    key_id     text NOT NULL,   -- control.evidence_keys
    signature  text NOT NULL    -- Ed25519 over the checkpoint's canonical text, hex
);

-- One alert per break (ops_alerts is unique per kind and thing).
ALTER TABLE ops_alerts DROP CONSTRAINT ops_alerts_kind_check;
ALTER TABLE ops_alerts ADD CONSTRAINT ops_alerts_kind_check
    CHECK (kind IN ('stuck_claim', 'failed_delivery', 'unknown_held', 'evidence_break'));
