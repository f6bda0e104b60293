-- The platform half (DESIGN-RULES.md): products, the subject register, the events outbox,
-- tenant-edited rules with versions, and rule claims in the same ledger as the licence.

-- New notification categories for rule notices (the preference centre lists them).
ALTER TABLE notifications DROP CONSTRAINT notifications_category_check;
ALTER TABLE notification_preferences DROP CONSTRAINT notification_preferences_category_check;
ALTER TABLE category_defaults DROP CONSTRAINT category_defaults_category_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_category_check CHECK (category IN (
    'document_review', 'questionnaire_assigned', 'response_revision', 'policy_approved',
    'report_ready', 'license_expiring', 'member_invite', 'vendor_questionnaire',
    'case_alert', 'case_update', 'obligation_due'));
ALTER TABLE notification_preferences ADD CONSTRAINT notification_preferences_category_check
    CHECK (category IN (
    'document_review', 'questionnaire_assigned', 'response_revision', 'policy_approved',
    'report_ready', 'license_expiring', 'member_invite', 'vendor_questionnaire',
    'case_alert', 'case_update', 'obligation_due'));
ALTER TABLE category_defaults ADD CONSTRAINT category_defaults_category_check CHECK (category IN (
    'document_review', 'questionnaire_assigned', 'response_revision', 'policy_approved',
    'report_ready', 'license_expiring', 'member_invite', 'vendor_questionnaire',
    'case_alert', 'case_update', 'obligation_due'));

-- External recipients (a rule's fixed addresses) are contact users: they can never sign in
-- (no password, no invitation), and they receive email through the same machinery.
ALTER TABLE users DROP CONSTRAINT users_role_check;
ALTER TABLE users ADD CONSTRAINT users_role_check
    CHECK (role IN ('admin', 'member', 'client_user', 'contact'));

-- A host application and its vocabulary.
CREATE TABLE products (
    code          text PRIMARY KEY CHECK (code ~ '^[a-z][a-z0-9_]{0,31}$'),
    name          text NOT NULL CHECK (length(btrim(name)) > 0),
    subject_kinds text[] NOT NULL DEFAULT '{}',
    trigger_types text[] NOT NULL DEFAULT
        '{field_changed,status_changed,assigned,form_submitted,message_posted}',
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- The tenant's hierarchy: departments, regions, ... each unit with its head.
CREATE TABLE hierarchy_units (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    level        text NOT NULL CHECK (level ~ '^[a-z][a-z0-9_]{0,31}$'),
    code         text NOT NULL,
    name         text NOT NULL,
    head_user_id bigint REFERENCES users (id),
    UNIQUE (level, code)
);

-- Holders of a named role (compliance_officer, case_manager, ...), beside users.role.
CREATE TABLE role_holders (
    role    text NOT NULL CHECK (role ~ '^[a-z][a-z0-9_]{0,63}$'),
    user_id bigint NOT NULL REFERENCES users (id),
    PRIMARY KEY (role, user_id)
);

-- The subject register: what a notification is about.
CREATE TABLE subjects (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    product           text NOT NULL REFERENCES products (code),
    kind              text NOT NULL CHECK (kind ~ '^[a-z][a-z0-9_]{0,31}$'),
    external_id       text NOT NULL CHECK (length(external_id) BETWEEN 1 AND 200),
    title             text NOT NULL DEFAULT '',
    time_zone         text,  -- the site's zone; NULL: the tenant's
    status            text NOT NULL DEFAULT 'open',
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    status_changed_at timestamptz NOT NULL DEFAULT now(),
    assigned_at       timestamptz,
    UNIQUE (product, kind, external_id)
);

CREATE TABLE subject_assignees (
    subject_id  bigint NOT NULL REFERENCES subjects (id),
    user_id     bigint NOT NULL REFERENCES users (id),
    assigned_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subject_id, user_id)
);
CREATE INDEX subject_assignees_by_user ON subject_assignees (user_id);

-- Facts, three families stored apart so each can be loaded alone (targeted loading).
CREATE TABLE subject_fields (          -- field.<name>
    subject_id bigint NOT NULL REFERENCES subjects (id),
    name       text NOT NULL,
    value      jsonb NOT NULL,
    PRIMARY KEY (subject_id, name)
);
CREATE TABLE subject_form_answers (    -- form.<form>.<field>
    subject_id   bigint NOT NULL REFERENCES subjects (id),
    form         text NOT NULL,
    field        text NOT NULL,
    value        jsonb NOT NULL,
    submitted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subject_id, form, field)
);
CREATE TABLE subject_hierarchy (       -- hierarchy.<level>: the unit's code
    subject_id bigint NOT NULL REFERENCES subjects (id),
    level      text NOT NULL,
    unit_id    bigint NOT NULL REFERENCES hierarchy_units (id),
    PRIMARY KEY (subject_id, level)
);

-- The outbox: one row per thing that happened to a subject, written in the transaction
-- of the write that caused it. The relay claims rows by status and lease (never by a
-- "last id seen": sequence order is not commit order).
CREATE TABLE events (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    product      text NOT NULL REFERENCES products (code),
    subject_id   bigint NOT NULL REFERENCES subjects (id),
    event_type   text NOT NULL CHECK (event_type IN ('created', 'updated')),
    trigger_type text,  -- for updates: field_changed, status_changed, assigned, ...
    changes      jsonb NOT NULL DEFAULT '{}',  -- {"field.x": {"from": .., "to": ..}}
    metadata     jsonb NOT NULL DEFAULT '{}',  -- {"form": "intake", ...}
    occurred_at  timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    source       text NOT NULL CHECK (source IN ('api', 'host', 'demo', 'cli')),
    status       text NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'processing', 'evaluated', 'failed')),
    claim_token  uuid,
    lease_until  timestamptz,
    attempts     integer NOT NULL DEFAULT 0,
    evaluated_at timestamptz,
    last_error   text,
    trace        jsonb,  -- per rule: the phase reached, each condition, the value seen
    CHECK ((event_type = 'updated') = (trigger_type IS NOT NULL))
);
CREATE INDEX events_ready ON events (recorded_at, id) WHERE status IN ('pending', 'processing');
CREATE INDEX events_by_subject ON events (subject_id, recorded_at DESC);
CREATE INDEX events_failed ON events (recorded_at) WHERE status = 'failed';

-- Idempotency records of the events API, kept as long as the events they answered.
CREATE TABLE api_idempotency (
    api_key_id      bigint NOT NULL,  -- control.api_keys (no cross-schema foreign key)
    idempotency_key text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    request_hash    text NOT NULL,
    response_status integer NOT NULL,
    response_body   jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (api_key_id, idempotency_key)
);

-- Rules: the current definition, and every version ever saved.
CREATE TABLE rules (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    product    text NOT NULL REFERENCES products (code),
    name       text NOT NULL CHECK (length(btrim(name)) BETWEEN 1 AND 200),
    kind       text NOT NULL CHECK (kind IN ('created', 'updated', 'time')),
    trigger_types text[] NOT NULL DEFAULT '{}',  -- updates: which trigger types (phase 1)
    enabled    boolean NOT NULL DEFAULT true,
    version    integer NOT NULL DEFAULT 1,
    definition jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (product, name)
);
CREATE INDEX rules_candidates ON rules (product, kind) WHERE enabled;

CREATE TABLE rule_versions (
    rule_id    bigint NOT NULL REFERENCES rules (id),
    version    integer NOT NULL,
    definition jsonb NOT NULL,
    enabled    boolean NOT NULL,
    changed_by text NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now(),
    summary    text NOT NULL DEFAULT '',
    PRIMARY KEY (rule_id, version)
);

-- Rule claims live in the ledger beside the licence's: rule 'rule:<id>', subject_kind
-- 'subject', threshold 'event:<id>' for event rules, so the same unique key makes each
-- (rule, event) claimed once. The row names the rule version that fired.
ALTER TABLE notification_ledger
    ADD COLUMN rule_id          bigint REFERENCES rules (id),
    ADD COLUMN rule_version     integer,
    ADD COLUMN event_id         bigint REFERENCES events (id),
    ADD COLUMN prepare_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN prepare_error    text,
    ADD COLUMN prepare_failed_at timestamptz;
CREATE INDEX ledger_by_rule ON notification_ledger (rule_id, claimed_at DESC) WHERE rule_id IS NOT NULL;
CREATE INDEX ledger_rule_unprepared ON notification_ledger (claimed_at)
    WHERE rule_id IS NOT NULL AND status = 'claimed' AND prepared_at IS NULL;
