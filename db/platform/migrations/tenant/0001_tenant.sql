-- One tenant's schema. Runs with search_path set (transaction-locally) to that schema.

CREATE TABLE clients (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name              text NOT NULL,
    plan              text NOT NULL DEFAULT 'standard' CHECK (plan IN ('standard', 'enterprise')),
    status            text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'expired', 'closed')),
    access_expires_on date NOT NULL,
    time_zone         text,  -- NULL: the tenant's default zone
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
-- Serves the scan's range "active or expired, expiring before the horizon".
CREATE INDEX clients_status_expiry ON clients (status, access_expires_on);

CREATE TABLE users (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email          text NOT NULL,
    display_name   text NOT NULL DEFAULT '',
    role           text NOT NULL CHECK (role IN ('admin', 'member', 'client_user')),
    client_id      bigint REFERENCES clients (id),
    password_hash  text,
    time_zone      text,
    deactivated_at timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CHECK ((role = 'client_user') = (client_id IS NOT NULL))
);
CREATE UNIQUE INDEX users_email_key ON users (lower(email));
CREATE INDEX users_active_by_client ON users (client_id) WHERE deactivated_at IS NULL;
CREATE INDEX users_active_admins ON users (id) WHERE role = 'admin' AND deactivated_at IS NULL;

CREATE TABLE license_events (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    client_id         bigint NOT NULL REFERENCES clients (id),
    event             text NOT NULL CHECK (event IN
                        ('created', 'reminder', 'expired', 'renewed', 'reactivated', 'closed')),
    access_expires_on date NOT NULL,
    threshold         text,
    actor             text NOT NULL,  -- 'system:scan', 'cli', 'user'
    actor_user_id     bigint REFERENCES users (id),
    occurred_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX license_events_by_client ON license_events (client_id, occurred_at);

-- The claim. Its unique key is Tocsin's correctness boundary: one row, ever, per
-- (rule, subject, threshold, due date). Claimed, delivered and acknowledged are separate
-- timestamps because they are separate events.
CREATE TABLE notification_ledger (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rule            text NOT NULL,
    subject_kind    text NOT NULL,
    subject_id      bigint NOT NULL,
    threshold       text NOT NULL,
    due_on          date NOT NULL,
    status          text NOT NULL DEFAULT 'claimed' CHECK (status IN ('claimed', 'skipped', 'cancelled')),
    status_reason   text,
    local_date      date NOT NULL,  -- the subject's local calendar date when this row was written
    claimed_at      timestamptz NOT NULL DEFAULT now(),
    prepared_at     timestamptz,
    delivered_at    timestamptz,
    acknowledged_at timestamptz,
    acknowledged_by bigint REFERENCES users (id),
    cancelled_at    timestamptz,
    CONSTRAINT notification_once UNIQUE (rule, subject_kind, subject_id, threshold, due_on)
);
-- Claims whose inbox rows and deliveries have not been written yet (normally none).
CREATE INDEX ledger_unprepared ON notification_ledger (id)
    WHERE status = 'claimed' AND prepared_at IS NULL;

CREATE TABLE notifications (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    recipient_user_id bigint NOT NULL REFERENCES users (id),
    ledger_id         bigint REFERENCES notification_ledger (id),
    category          text NOT NULL CHECK (category IN (
                        'document_review', 'questionnaire_assigned', 'response_revision',
                        'policy_approved', 'report_ready', 'license_expiring', 'member_invite',
                        'vendor_questionnaire')),
    title             text NOT NULL,
    body              text NOT NULL,
    data              jsonb NOT NULL DEFAULT '{}',
    idempotency_key   text NOT NULL UNIQUE,
    created_at        timestamptz NOT NULL DEFAULT now(),
    read_at           timestamptz,
    archived_at       timestamptz
);
-- The badge: unread, unarchived count per user.
CREATE INDEX notifications_unread ON notifications (recipient_user_id)
    WHERE read_at IS NULL AND archived_at IS NULL;
-- The feed, newest first; id breaks ties for keyset pagination.
CREATE INDEX notifications_feed ON notifications (recipient_user_id, created_at DESC, id DESC);
CREATE INDEX notifications_by_ledger ON notifications (ledger_id);

CREATE TABLE notification_deliveries (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    notification_id     bigint NOT NULL REFERENCES notifications (id),
    channel             text NOT NULL CHECK (channel IN ('email', 'in_app')),
    status              text NOT NULL DEFAULT 'pending' CHECK (status IN (
                          'pending', 'deferred', 'batched', 'sending', 'accepted', 'delivered',
                          'bounced', 'complained', 'failed', 'unknown', 'cancelled')),
    status_reason       text,
    send_after          timestamptz NOT NULL DEFAULT now(),
    attempts            integer NOT NULL DEFAULT 0,
    claim_token         uuid,
    lease_until         timestamptz,
    enqueued_at         timestamptz,
    provider_message_id text,
    last_error          text,
    last_error_class    text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    accepted_at         timestamptz,
    UNIQUE (notification_id, channel)
);
CREATE INDEX deliveries_pending ON notification_deliveries (send_after) WHERE status = 'pending';
CREATE UNIQUE INDEX deliveries_provider_message ON notification_deliveries (provider_message_id)
    WHERE provider_message_id IS NOT NULL;

-- Every attempt, whatever its outcome: the history behind a delivery's current status.
-- No message bodies or addresses are kept here.
CREATE TABLE delivery_attempts (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id         bigint NOT NULL REFERENCES notification_deliveries (id),
    attempt_no          integer NOT NULL,
    claim_token         uuid NOT NULL,
    started_at          timestamptz NOT NULL DEFAULT now(),
    ended_at            timestamptz,
    outcome             text CHECK (outcome IN ('accepted', 'retry', 'failed', 'unknown', 'cancelled')),
    provider_request_id text,
    provider_message_id text,
    error_class         text,
    error               text,
    UNIQUE (delivery_id, attempt_no)
);
