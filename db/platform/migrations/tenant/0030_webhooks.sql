-- Outbound webhooks (domain/delivery/webhooks.py): the tenant's endpoints, one delivery per
-- (endpoint, event), and every attempt at it.

-- An endpoint of the tenant's own systems. The signing secret is kept as the Standard
-- Webhooks spec writes it (whsec_ + base64); during a rotation the previous one signs too,
-- until previous_secret_until. Its health: the failures in a row (the circuit breaker opens
-- at domain's BREAKER_FAILURES), since when it has failed without a success in between (it
-- is disabled after DISABLE_AFTER), and why it was disabled.
CREATE TABLE webhook_endpoints (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    url                   text NOT NULL CHECK (length(url) <= 2000),
    description           text NOT NULL DEFAULT '' CHECK (length(description) <= 200),
    event_kinds           text[] NOT NULL CHECK (cardinality(event_kinds) > 0),
    enabled               boolean NOT NULL DEFAULT true,
    secret                text NOT NULL,
    previous_secret       text,
    previous_secret_until timestamptz,
    consecutive_failures  integer NOT NULL DEFAULT 0,
    circuit_open_until    timestamptz,
    failing_since         timestamptz,
    disabled_at           timestamptz,
    disabled_reason       text,
    disabled_count        integer NOT NULL DEFAULT 0,  -- names each disabling's notice to admins
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now()
);

-- One event for one endpoint. Its id is the webhook-id every attempt carries, so a receiver
-- deduplicates a repeat. A claim yields at most one delivery per endpoint and kind.
CREATE TABLE webhook_deliveries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id     bigint NOT NULL REFERENCES webhook_endpoints (id),
    event_kind      text NOT NULL,
    ledger_id       bigint REFERENCES notification_ledger (id),
    payload         jsonb NOT NULL,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN (
                      'pending', 'sending', 'delivered', 'failed', 'cancelled')),
    status_reason   text,
    send_after      timestamptz NOT NULL DEFAULT now(),
    attempts        integer NOT NULL DEFAULT 0,
    claim_token     uuid,
    lease_until     timestamptz,
    enqueued_at     timestamptz,
    last_status_code integer,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz
);
CREATE UNIQUE INDEX webhook_deliveries_one_per_claim
    ON webhook_deliveries (endpoint_id, event_kind, ledger_id) WHERE ledger_id IS NOT NULL;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (send_after, id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (lease_until) WHERE status = 'sending';
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (endpoint_id, id DESC);

-- Every attempt: its HTTP status, latency and the first kilobyte of the answer. called_at is
-- committed right before the request leaves, so an attempt whose worker died shows it was
-- made (outcome unknown) and is repeated with the same webhook-id.
CREATE TABLE webhook_attempts (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id  bigint NOT NULL REFERENCES webhook_deliveries (id),
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

CREATE TRIGGER webhook_delivery_moves_allowed
    BEFORE UPDATE OF status ON webhook_deliveries
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION control.guard_state_move('webhook');

-- The admins' notice that an endpoint was disabled (in the inbox only: it is about the
-- tenant's own systems, not a preference anyone sets).
ALTER TABLE notifications DROP CONSTRAINT notifications_category_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_category_check CHECK (category IN (
    'document_review', 'questionnaire_assigned', 'response_revision', 'policy_approved',
    'report_ready', 'license_expiring', 'member_invite', 'vendor_questionnaire',
    'case_alert', 'case_update', 'obligation_due', 'webhook_disabled'));
