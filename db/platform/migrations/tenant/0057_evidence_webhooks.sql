-- Webhook deliveries and their attempts (issue 27) join the evidence chain, as email deliveries
-- and their attempts do (docs/design/evidence.md, "What is chained"):
--   webhook_delivery          a delivery is written (endpoint, event kind, claim, time, status);
--   webhook_delivery_status   its status moves;
--   webhook_attempt           an attempt is called, or ends without a call (number, claim token,
--                             start, call time): an attempt released before its call is deleted
--                             by the sender (db/delivery/webhook_deliveries.py) and was never
--                             evidence of anything, so it is chained only from then on;
--   webhook_attempt_outcome   its outcome is recorded (outcome, end, HTTP status, latency).
-- The payload sent, the receiver's answer and error texts are not chained (they may name
-- people, and erasure and retention rewrite them); their webhook-id is the delivery's id.

CREATE FUNCTION evidence_webhook_delivery(r webhook_deliveries) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"created_at":' || control.ev_time(r.created_at) || ',"endpoint_id":' || control.ev_int(r.endpoint_id)
        || ',"event_kind":' || control.ev_text(r.event_kind) || ',"id":' || control.ev_int(r.id)
        || ',"ledger_id":' || control.ev_int(r.ledger_id) || ',"status":' || control.ev_text(r.status) || '}' $$;

CREATE FUNCTION evidence_webhook_delivery_status(r webhook_deliveries) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"id":' || control.ev_int(r.id) || ',"status":' || control.ev_text(r.status) || '}' $$;

CREATE FUNCTION evidence_webhook_attempt(r webhook_attempts) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"attempt_no":' || control.ev_int(r.attempt_no) || ',"called_at":' || control.ev_time(r.called_at)
        || ',"claim_token":' || control.ev_text(r.claim_token::text)
        || ',"delivery_id":' || control.ev_int(r.delivery_id) || ',"id":' || control.ev_int(r.id)
        || ',"started_at":' || control.ev_time(r.started_at) || '}' $$;

CREATE FUNCTION evidence_webhook_attempt_outcome(r webhook_attempts) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"ended_at":' || control.ev_time(r.ended_at) || ',"id":' || control.ev_int(r.id)
        || ',"latency_ms":' || control.ev_int(r.latency_ms) || ',"outcome":' || control.ev_text(r.outcome)
        || ',"status_code":' || control.ev_int(r.status_code) || '}' $$;

CREATE FUNCTION evidence_on_webhook_delivery_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO evidence_pending (kind, ref, payload)
    SELECT 'webhook_delivery', n.id::text, evidence_webhook_delivery(n) FROM new_rows n ORDER BY n.id;
    RETURN NULL;
END
$$;

CREATE FUNCTION evidence_on_webhook_delivery_move() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO evidence_pending (kind, ref, payload)
    VALUES ('webhook_delivery_status', NEW.id::text, evidence_webhook_delivery_status(NEW));
    RETURN NULL;
END
$$;

-- An attempt inserted already called or ended (not what the sender does; a backfill might).
CREATE FUNCTION evidence_on_webhook_attempt_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO evidence_pending (kind, ref, payload)
    SELECT f.kind, n.id::text, f.payload FROM new_rows n,
        LATERAL (VALUES (1, 'webhook_attempt', evidence_webhook_attempt(n)),
                        (2, 'webhook_attempt_outcome', evidence_webhook_attempt_outcome(n))) f (o, kind, payload)
    WHERE (n.called_at IS NOT NULL OR n.ended_at IS NOT NULL) AND (f.o = 1 OR n.ended_at IS NOT NULL)
    ORDER BY n.id, f.o;
    RETURN NULL;
END
$$;

CREATE FUNCTION evidence_on_webhook_attempt_move() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF OLD.called_at IS NULL AND OLD.ended_at IS NULL THEN  -- it becomes evidence now
        INSERT INTO evidence_pending (kind, ref, payload)
        VALUES ('webhook_attempt', NEW.id::text, evidence_webhook_attempt(NEW));
    END IF;
    IF OLD.outcome IS DISTINCT FROM NEW.outcome OR OLD.ended_at IS DISTINCT FROM NEW.ended_at
            OR OLD.status_code IS DISTINCT FROM NEW.status_code
            OR OLD.latency_ms IS DISTINCT FROM NEW.latency_ms THEN
        INSERT INTO evidence_pending (kind, ref, payload)
        VALUES ('webhook_attempt_outcome', NEW.id::text, evidence_webhook_attempt_outcome(NEW));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER evidence_webhook_deliveries AFTER INSERT ON webhook_deliveries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION evidence_on_webhook_delivery_insert();
CREATE TRIGGER evidence_webhook_delivery_status AFTER UPDATE OF status ON webhook_deliveries
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION evidence_on_webhook_delivery_move();
CREATE TRIGGER evidence_webhook_attempts AFTER INSERT ON webhook_attempts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION evidence_on_webhook_attempt_insert();
-- Once chained, a change of called_at is not a fact: verify names it as an edit.
CREATE TRIGGER evidence_webhook_attempt_moves
    AFTER UPDATE OF called_at, ended_at, outcome, status_code, latency_ms ON webhook_attempts
    FOR EACH ROW WHEN ((OLD.called_at IS NULL AND OLD.ended_at IS NULL
                        AND (NEW.called_at IS NOT NULL OR NEW.ended_at IS NOT NULL))
                       OR OLD.outcome IS DISTINCT FROM NEW.outcome OR OLD.ended_at IS DISTINCT FROM NEW.ended_at
                       OR OLD.status_code IS DISTINCT FROM NEW.status_code
                       OR OLD.latency_ms IS DISTINCT FROM NEW.latency_ms)
    EXECUTE FUNCTION evidence_on_webhook_attempt_move();

-- The webhook history found when this migration ran, as it stands (a delivery's current
-- status is its insert fact's; an attempt's outcome follows its own record).
INSERT INTO evidence_pending (kind, ref, payload)
SELECT 'webhook_delivery', id::text, evidence_webhook_delivery(d) FROM webhook_deliveries d ORDER BY id;
INSERT INTO evidence_pending (kind, ref, payload)
SELECT f.kind, a.id::text, f.payload FROM webhook_attempts a,
    LATERAL (VALUES (1, 'webhook_attempt', evidence_webhook_attempt(a)),
                    (2, 'webhook_attempt_outcome', evidence_webhook_attempt_outcome(a))) f (o, kind, payload)
WHERE (a.called_at IS NOT NULL OR a.ended_at IS NOT NULL) AND (f.o = 1 OR a.ended_at IS NOT NULL)
ORDER BY a.id, f.o;
