-- Email failover to SMTP (domain/delivery/failover.py): the classes of SES failure the tenant
-- chose, the tenant's current streak of SES failures, and on each attempt the providers it
-- went through.

-- One row: absent means SES only (every class off).
CREATE TABLE email_failover_policy (
    id                boolean PRIMARY KEY DEFAULT true CHECK (id),
    on_paused         boolean NOT NULL DEFAULT false,
    on_throttled      boolean NOT NULL DEFAULT false,
    throttled_minutes integer NOT NULL DEFAULT 15 CHECK (throttled_minutes BETWEEN 0 AND 1440),
    on_5xx            boolean NOT NULL DEFAULT false,
    run_of_5xx        integer NOT NULL DEFAULT 3 CHECK (run_of_5xx BETWEEN 1 AND 100),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    updated_by        bigint REFERENCES users (id)
);

-- The streak every worker adds to (one row): 5xx answers in a row, throttled since when.
-- Written only when SES fails, and reset by the first acceptance after a failure.
CREATE TABLE ses_failure_run (
    id              boolean PRIMARY KEY DEFAULT true CHECK (id),
    server_errors   integer NOT NULL DEFAULT 0,
    throttled_since timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- The providers an attempt went through, in order ('ses', then 'smtp' after a failover),
-- and why it failed over. Written before the SMTP call, like provider_called_at.
ALTER TABLE delivery_attempts
    ADD COLUMN providers text[] NOT NULL DEFAULT '{ses}',
    ADD COLUMN failover_reason text;
