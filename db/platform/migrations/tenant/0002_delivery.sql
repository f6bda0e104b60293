-- Delivery you can trust: uncertain outcomes, provider events, suppression, ops alerts.

-- When a delivery's outcome became unknown (the provider may or may not have it).
ALTER TABLE notification_deliveries ADD COLUMN unknown_since timestamptz;

-- Set in its own commit right before the provider call: an attempt whose lease expired
-- without it never reached the provider and is safe to retry; one with it is unknown.
ALTER TABLE delivery_attempts ADD COLUMN provider_called_at timestamptz;
ALTER TABLE delivery_attempts DROP CONSTRAINT delivery_attempts_outcome_check;
ALTER TABLE delivery_attempts ADD CONSTRAINT delivery_attempts_outcome_check CHECK (outcome IN
    ('accepted', 'retry', 'failed', 'unknown', 'cancelled', 'abandoned', 'deferred', 'batched'));

-- Due work for the sweeper and the claim: pending and deferred rows by due time.
DROP INDEX deliveries_pending;
CREATE INDEX deliveries_due ON notification_deliveries (send_after, id)
    WHERE status IN ('pending', 'deferred');
CREATE INDEX deliveries_leased ON notification_deliveries (lease_until) WHERE status = 'sending';
CREATE INDEX deliveries_unknown ON notification_deliveries (unknown_since) WHERE status = 'unknown';
CREATE INDEX deliveries_failed ON notification_deliveries (updated_at) WHERE status = 'failed';

-- Addresses that hard-bounced or complained: checked before every send.
CREATE TABLE suppressed_addresses (
    email              text PRIMARY KEY CHECK (email = lower(email)),
    reason             text NOT NULL CHECK (reason IN ('bounce', 'complaint', 'manual')),
    source_delivery_id bigint REFERENCES notification_deliveries (id),
    created_at         timestamptz NOT NULL DEFAULT now()
);

-- What the provider told us about a delivery, one row per event, as received.
CREATE TABLE delivery_events (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id         bigint NOT NULL REFERENCES notification_deliveries (id),
    event_type          text NOT NULL CHECK (event_type IN
                          ('send', 'delivery', 'bounce', 'complaint', 'reject', 'delivery_delay')),
    provider_message_id text NOT NULL,
    detail              text,
    occurred_at         timestamptz NOT NULL,
    received_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX delivery_events_by_delivery ON delivery_events (delivery_id, occurred_at);

-- Alerts for operators, each published to the ops topic once per thing it is about.
CREATE TABLE ops_alerts (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind         text NOT NULL CHECK (kind IN ('stuck_claim', 'failed_delivery', 'unknown_held')),
    ref_id       bigint NOT NULL,  -- the ledger row or delivery it is about
    summary      text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    UNIQUE (kind, ref_id)
);
CREATE INDEX ops_alerts_unpublished ON ops_alerts (id) WHERE published_at IS NULL;
