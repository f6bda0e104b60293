-- SMS through AWS SNS (domain/delivery/sms.py): each person's phone number and SMS choice
-- per category, the tenant's STOP list, one delivery per notification (that is, per claim
-- and recipient) on the sms channel, and every attempt with what it cost.

-- A person's mobile number, kept in E.164 (+ and up to 15 digits).
CREATE TABLE sms_numbers (
    user_id    bigint PRIMARY KEY REFERENCES users (id),
    phone      text NOT NULL CHECK (phone ~ '^\+[1-9][0-9]{6,14}$'),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Texts are opt-in per category: no row, no text (each one costs money).
CREATE TABLE sms_preferences (
    user_id    bigint NOT NULL REFERENCES users (id),
    category   text NOT NULL,
    sms        boolean NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, category)
);

-- Numbers that must receive no text: a STOP the person asked for in the portal, one an
-- administrator entered, one the provider reported opted out.
CREATE TABLE sms_opt_outs (
    phone      text PRIMARY KEY CHECK (phone ~ '^\+[1-9][0-9]{6,14}$'),
    source     text NOT NULL CHECK (source IN ('person', 'admin', 'provider')),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One text per notification (a notification is one claim for one recipient). Its status
-- moves along the same machine as an email's (domain/delivery/states.py DELIVERY).
CREATE TABLE sms_deliveries (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    notification_id     bigint NOT NULL UNIQUE REFERENCES notifications (id),
    status              text NOT NULL DEFAULT 'pending' CHECK (status IN (
                          'pending', 'deferred', 'sending', 'accepted', 'failed', 'unknown',
                          'cancelled')),
    status_reason       text,
    send_after          timestamptz NOT NULL DEFAULT now(),
    attempts            integer NOT NULL DEFAULT 0,
    claim_token         uuid,
    lease_until         timestamptz,
    enqueued_at         timestamptz,
    provider_message_id text,
    accepted_at         timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sms_deliveries_due ON sms_deliveries (send_after, id) WHERE status IN ('pending', 'deferred');
CREATE INDEX sms_deliveries_leased ON sms_deliveries (lease_until) WHERE status = 'sending';

-- Every attempt. called_at is committed right before the publish, with the number, the
-- segments and the price reserved against the month's cap; an attempt that ended without
-- reaching SNS gives its price back (cost NULL).
CREATE TABLE sms_attempts (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id  bigint NOT NULL REFERENCES sms_deliveries (id),
    attempt_no   integer NOT NULL,
    claim_token  uuid NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    called_at    timestamptz,
    ended_at     timestamptz,
    outcome      text CHECK (outcome IN ('accepted', 'retry', 'failed', 'unknown', 'cancelled')),
    phone        text,
    segments     integer,
    cost         numeric(12, 5),
    provider_message_id text,
    error        text,
    UNIQUE (delivery_id, attempt_no)
);
CREATE INDEX sms_attempts_spend ON sms_attempts (called_at) WHERE cost IS NOT NULL;

CREATE TRIGGER sms_delivery_moves_allowed
    BEFORE UPDATE OF status ON sms_deliveries
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION control.guard_state_move('delivery');
