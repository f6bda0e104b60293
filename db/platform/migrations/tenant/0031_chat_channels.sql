-- Slack and Microsoft Teams through incoming webhooks (domain/delivery/chat.py).

-- The tenant's switch per chat channel and its own channel's URL (one message per claim;
-- NULL: people's own URLs only).
CREATE TABLE chat_channels (
    channel     text PRIMARY KEY CHECK (channel IN ('slack', 'teams')),
    enabled     boolean NOT NULL DEFAULT false,
    webhook_url text CHECK (length(webhook_url) <= 2000),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  bigint REFERENCES users (id)
);

-- The health of each incoming-webhook URL called: the last success and failure, the
-- failures in a row; the circuit opens at webhooks' BREAKER_FAILURES for BREAKER_COOLDOWN,
-- so one person's broken URL never holds back the others.
CREATE TABLE chat_url_health (
    webhook_url          text PRIMARY KEY,
    channel              text NOT NULL CHECK (channel IN ('slack', 'teams')),
    consecutive_failures integer NOT NULL DEFAULT 0,
    circuit_open_until   timestamptz,
    last_success_at      timestamptz,
    last_failure_at      timestamptz,
    last_error           text
);

-- A person's own incoming-webhook URL per chat channel (set in the preference centre).
CREATE TABLE chat_addresses (
    user_id     bigint NOT NULL REFERENCES users (id),
    channel     text NOT NULL CHECK (channel IN ('slack', 'teams')),
    webhook_url text NOT NULL CHECK (length(webhook_url) <= 2000),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, channel)
);

-- On/off per (user, category, chat channel) and the tenant's default per (category, chat
-- channel); resolved like the email and inbox columns (domain resolve_channel_choice), the
-- lock being category_defaults.locked.
CREATE TABLE chat_preferences (
    user_id    bigint NOT NULL REFERENCES users (id),
    category   text NOT NULL,
    channel    text NOT NULL CHECK (channel IN ('slack', 'teams')),
    enabled    boolean NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, category, channel)
);
CREATE TABLE chat_category_defaults (
    category   text NOT NULL,
    channel    text NOT NULL CHECK (channel IN ('slack', 'teams')),
    enabled    boolean NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (category, channel)
);

-- One message per (claim, recipient, channel); the tenant's own channel is the recipient
-- NULL (one per claim). The URL is copied at queueing time, so a person who changes theirs
-- later does not redirect a message already on its way.
CREATE TABLE chat_deliveries (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_id         bigint NOT NULL REFERENCES notification_ledger (id),
    recipient_user_id bigint REFERENCES users (id),
    channel           text NOT NULL CHECK (channel IN ('slack', 'teams')),
    webhook_url       text NOT NULL,
    title             text NOT NULL,
    text              text NOT NULL,
    href              text NOT NULL,  -- the portal path the message links to
    status            text NOT NULL DEFAULT 'pending' CHECK (status IN (
                        'pending', 'deferred', 'sending', 'delivered', 'failed', 'cancelled')),
    status_reason     text,
    critical          boolean NOT NULL DEFAULT false,
    send_after        timestamptz NOT NULL DEFAULT now(),
    attempts          integer NOT NULL DEFAULT 0,
    claim_token       uuid,
    lease_until       timestamptz,
    enqueued_at       timestamptz,
    last_status_code  integer,
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    delivered_at      timestamptz
);
CREATE UNIQUE INDEX chat_deliveries_one_per_claim_recipient_channel
    ON chat_deliveries (ledger_id, coalesce(recipient_user_id, 0), channel);
CREATE INDEX chat_deliveries_due ON chat_deliveries (send_after, id)
    WHERE status IN ('pending', 'deferred');
CREATE INDEX chat_deliveries_leased ON chat_deliveries (lease_until) WHERE status = 'sending';

-- Every attempt. called_at is committed right before the request leaves: an attempt whose
-- worker died after it is `unknown` (the message may be in the channel) and is sent again.
CREATE TABLE chat_attempts (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id  bigint NOT NULL REFERENCES chat_deliveries (id),
    attempt_no   integer NOT NULL,
    claim_token  uuid NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    called_at    timestamptz,
    ended_at     timestamptz,
    outcome      text CHECK (outcome IN ('delivered', 'retry', 'failed', 'unknown', 'refused')),
    status_code  integer,
    latency_ms   integer,
    response     text CHECK (octet_length(response) <= 1024),
    error        text,
    UNIQUE (delivery_id, attempt_no)
);

CREATE TRIGGER chat_delivery_moves_allowed
    BEFORE UPDATE OF status ON chat_deliveries
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION control.guard_state_move('chat');
