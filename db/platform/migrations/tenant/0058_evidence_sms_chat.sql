-- SMS texts and Slack/Teams chat messages, their deliveries and attempts (issue 29), join the
-- evidence chain as webhook deliveries did in 0057 (docs/design/evidence.md, "What is chained"):
--   sms_delivery / chat_delivery                 a delivery is written (its notification or
--                                                claim, channel, recipient user id, time, status);
--   sms_delivery_status / chat_delivery_status   its status moves;
--   sms_attempt / chat_attempt                   an attempt is called, or ends without a call
--                                                (number, claim token, start, call time; for a
--                                                text the segments and the price reserved): a
--                                                chat attempt released before its call is
--                                                deleted by the sender and was never evidence,
--                                                so both are chained only from then on;
--   sms_attempt_outcome / chat_attempt_outcome   its end (outcome, end time; a text's final
--                                                price and SNS message id, a chat call's HTTP
--                                                status and latency).
-- Not chained: the phone number (personal data, blanked by retention), the chat webhook URL
-- (a secret), the chat title, text and link, the answers and error texts (they may name
-- people; retention and erasure rewrite them). A text's price is chained as its decimal text.

CREATE FUNCTION evidence_sms_delivery(r sms_deliveries) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"created_at":' || control.ev_time(r.created_at) || ',"id":' || control.ev_int(r.id)
        || ',"notification_id":' || control.ev_int(r.notification_id)
        || ',"status":' || control.ev_text(r.status) || '}' $$;

CREATE FUNCTION evidence_sms_delivery_status(r sms_deliveries) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"id":' || control.ev_int(r.id) || ',"status":' || control.ev_text(r.status) || '}' $$;

CREATE FUNCTION evidence_sms_attempt(r sms_attempts) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"attempt_no":' || control.ev_int(r.attempt_no) || ',"called_at":' || control.ev_time(r.called_at)
        || ',"claim_token":' || control.ev_text(r.claim_token::text)
        || ',"cost":' || control.ev_text(r.cost::text)
        || ',"delivery_id":' || control.ev_int(r.delivery_id) || ',"id":' || control.ev_int(r.id)
        || ',"segments":' || control.ev_int(r.segments)
        || ',"started_at":' || control.ev_time(r.started_at) || '}' $$;

CREATE FUNCTION evidence_sms_attempt_outcome(r sms_attempts) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"cost":' || control.ev_text(r.cost::text) || ',"ended_at":' || control.ev_time(r.ended_at)
        || ',"id":' || control.ev_int(r.id) || ',"outcome":' || control.ev_text(r.outcome)
        || ',"provider_message_id":' || control.ev_text(r.provider_message_id) || '}' $$;

CREATE FUNCTION evidence_chat_delivery(r chat_deliveries) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"channel":' || control.ev_text(r.channel) || ',"created_at":' || control.ev_time(r.created_at)
        || ',"critical":' || control.ev_bool(r.critical) || ',"id":' || control.ev_int(r.id)
        || ',"ledger_id":' || control.ev_int(r.ledger_id)
        || ',"recipient_user_id":' || control.ev_int(r.recipient_user_id)
        || ',"status":' || control.ev_text(r.status) || '}' $$;

CREATE FUNCTION evidence_chat_delivery_status(r chat_deliveries) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"id":' || control.ev_int(r.id) || ',"status":' || control.ev_text(r.status) || '}' $$;

CREATE FUNCTION evidence_chat_attempt(r chat_attempts) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"attempt_no":' || control.ev_int(r.attempt_no) || ',"called_at":' || control.ev_time(r.called_at)
        || ',"claim_token":' || control.ev_text(r.claim_token::text)
        || ',"delivery_id":' || control.ev_int(r.delivery_id) || ',"id":' || control.ev_int(r.id)
        || ',"started_at":' || control.ev_time(r.started_at) || '}' $$;

CREATE FUNCTION evidence_chat_attempt_outcome(r chat_attempts) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT '{"ended_at":' || control.ev_time(r.ended_at) || ',"id":' || control.ev_int(r.id)
        || ',"latency_ms":' || control.ev_int(r.latency_ms) || ',"outcome":' || control.ev_text(r.outcome)
        || ',"status_code":' || control.ev_int(r.status_code) || '}' $$;

-- --- SMS ---------------------------------------------------------------------------------

CREATE FUNCTION evidence_on_sms_delivery_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO evidence_pending (kind, ref, payload)
    SELECT 'sms_delivery', n.id::text, evidence_sms_delivery(n) FROM new_rows n ORDER BY n.id;
    RETURN NULL;
END
$$;

CREATE FUNCTION evidence_on_sms_delivery_move() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO evidence_pending (kind, ref, payload)
    VALUES ('sms_delivery_status', NEW.id::text, evidence_sms_delivery_status(NEW));
    RETURN NULL;
END
$$;

-- An attempt inserted already called or ended (not what the sender does; a backfill might).
CREATE FUNCTION evidence_on_sms_attempt_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO evidence_pending (kind, ref, payload)
    SELECT f.kind, n.id::text, f.payload FROM new_rows n,
        LATERAL (VALUES (1, 'sms_attempt', evidence_sms_attempt(n)),
                        (2, 'sms_attempt_outcome', evidence_sms_attempt_outcome(n))) f (o, kind, payload)
    WHERE (n.called_at IS NOT NULL OR n.ended_at IS NOT NULL) AND (f.o = 1 OR n.ended_at IS NOT NULL)
    ORDER BY n.id, f.o;
    RETURN NULL;
END
$$;

-- The price is reserved with the call (in the attempt's fact) and kept or given back at the
-- end (in the outcome's): a change of it is an outcome only once the attempt has ended.
CREATE FUNCTION evidence_on_sms_attempt_move() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF OLD.called_at IS NULL AND OLD.ended_at IS NULL THEN  -- it becomes evidence now
        INSERT INTO evidence_pending (kind, ref, payload)
        VALUES ('sms_attempt', NEW.id::text, evidence_sms_attempt(NEW));
    END IF;
    IF NEW.ended_at IS NOT NULL AND (OLD.outcome IS DISTINCT FROM NEW.outcome
            OR OLD.ended_at IS DISTINCT FROM NEW.ended_at OR OLD.cost IS DISTINCT FROM NEW.cost
            OR OLD.provider_message_id IS DISTINCT FROM NEW.provider_message_id) THEN
        INSERT INTO evidence_pending (kind, ref, payload)
        VALUES ('sms_attempt_outcome', NEW.id::text, evidence_sms_attempt_outcome(NEW));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER evidence_sms_deliveries AFTER INSERT ON sms_deliveries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION evidence_on_sms_delivery_insert();
CREATE TRIGGER evidence_sms_delivery_status AFTER UPDATE OF status ON sms_deliveries
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION evidence_on_sms_delivery_move();
CREATE TRIGGER evidence_sms_attempts AFTER INSERT ON sms_attempts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION evidence_on_sms_attempt_insert();
-- Once chained, a change of called_at or segments is not a fact: verify names it as an edit.
CREATE TRIGGER evidence_sms_attempt_moves
    AFTER UPDATE OF called_at, ended_at, outcome, cost, provider_message_id ON sms_attempts
    FOR EACH ROW WHEN ((OLD.called_at IS NULL AND OLD.ended_at IS NULL
                        AND (NEW.called_at IS NOT NULL OR NEW.ended_at IS NOT NULL))
                       OR (NEW.ended_at IS NOT NULL AND (OLD.outcome IS DISTINCT FROM NEW.outcome
                           OR OLD.ended_at IS DISTINCT FROM NEW.ended_at OR OLD.cost IS DISTINCT FROM NEW.cost
                           OR OLD.provider_message_id IS DISTINCT FROM NEW.provider_message_id)))
    EXECUTE FUNCTION evidence_on_sms_attempt_move();

-- --- chat --------------------------------------------------------------------------------

CREATE FUNCTION evidence_on_chat_delivery_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO evidence_pending (kind, ref, payload)
    SELECT 'chat_delivery', n.id::text, evidence_chat_delivery(n) FROM new_rows n ORDER BY n.id;
    RETURN NULL;
END
$$;

CREATE FUNCTION evidence_on_chat_delivery_move() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO evidence_pending (kind, ref, payload)
    VALUES ('chat_delivery_status', NEW.id::text, evidence_chat_delivery_status(NEW));
    RETURN NULL;
END
$$;

CREATE FUNCTION evidence_on_chat_attempt_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO evidence_pending (kind, ref, payload)
    SELECT f.kind, n.id::text, f.payload FROM new_rows n,
        LATERAL (VALUES (1, 'chat_attempt', evidence_chat_attempt(n)),
                        (2, 'chat_attempt_outcome', evidence_chat_attempt_outcome(n))) f (o, kind, payload)
    WHERE (n.called_at IS NOT NULL OR n.ended_at IS NOT NULL) AND (f.o = 1 OR n.ended_at IS NOT NULL)
    ORDER BY n.id, f.o;
    RETURN NULL;
END
$$;

CREATE FUNCTION evidence_on_chat_attempt_move() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF OLD.called_at IS NULL AND OLD.ended_at IS NULL THEN  -- it becomes evidence now
        INSERT INTO evidence_pending (kind, ref, payload)
        VALUES ('chat_attempt', NEW.id::text, evidence_chat_attempt(NEW));
    END IF;
    IF OLD.outcome IS DISTINCT FROM NEW.outcome OR OLD.ended_at IS DISTINCT FROM NEW.ended_at
            OR OLD.status_code IS DISTINCT FROM NEW.status_code
            OR OLD.latency_ms IS DISTINCT FROM NEW.latency_ms THEN
        INSERT INTO evidence_pending (kind, ref, payload)
        VALUES ('chat_attempt_outcome', NEW.id::text, evidence_chat_attempt_outcome(NEW));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER evidence_chat_deliveries AFTER INSERT ON chat_deliveries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION evidence_on_chat_delivery_insert();
CREATE TRIGGER evidence_chat_delivery_status AFTER UPDATE OF status ON chat_deliveries
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION evidence_on_chat_delivery_move();
CREATE TRIGGER evidence_chat_attempts AFTER INSERT ON chat_attempts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION evidence_on_chat_attempt_insert();
-- Once chained, a change of called_at is not a fact: verify names it as an edit.
CREATE TRIGGER evidence_chat_attempt_moves
    AFTER UPDATE OF called_at, ended_at, outcome, status_code, latency_ms ON chat_attempts
    FOR EACH ROW WHEN ((OLD.called_at IS NULL AND OLD.ended_at IS NULL
                        AND (NEW.called_at IS NOT NULL OR NEW.ended_at IS NOT NULL))
                       OR OLD.outcome IS DISTINCT FROM NEW.outcome OR OLD.ended_at IS DISTINCT FROM NEW.ended_at
                       OR OLD.status_code IS DISTINCT FROM NEW.status_code
                       OR OLD.latency_ms IS DISTINCT FROM NEW.latency_ms)
    EXECUTE FUNCTION evidence_on_chat_attempt_move();

-- The SMS and chat history found when this migration ran, as it stands (a delivery's current
-- status is its insert fact's; an attempt's outcome follows its own record).
INSERT INTO evidence_pending (kind, ref, payload)
SELECT 'sms_delivery', id::text, evidence_sms_delivery(d) FROM sms_deliveries d ORDER BY id;
INSERT INTO evidence_pending (kind, ref, payload)
SELECT f.kind, a.id::text, f.payload FROM sms_attempts a,
    LATERAL (VALUES (1, 'sms_attempt', evidence_sms_attempt(a)),
                    (2, 'sms_attempt_outcome', evidence_sms_attempt_outcome(a))) f (o, kind, payload)
WHERE (a.called_at IS NOT NULL OR a.ended_at IS NOT NULL) AND (f.o = 1 OR a.ended_at IS NOT NULL)
ORDER BY a.id, f.o;
INSERT INTO evidence_pending (kind, ref, payload)
SELECT 'chat_delivery', id::text, evidence_chat_delivery(d) FROM chat_deliveries d ORDER BY id;
INSERT INTO evidence_pending (kind, ref, payload)
SELECT f.kind, a.id::text, f.payload FROM chat_attempts a,
    LATERAL (VALUES (1, 'chat_attempt', evidence_chat_attempt(a)),
                    (2, 'chat_attempt_outcome', evidence_chat_attempt_outcome(a))) f (o, kind, payload)
WHERE (a.called_at IS NOT NULL OR a.ended_at IS NOT NULL) AND (f.o = 1 OR a.ended_at IS NOT NULL)
ORDER BY a.id, f.o;
