-- The organisation's evidence settings (set by its administrators on the settings page):
-- the compliance address that receives a copy of every signed checkpoint, and how long
-- message bodies and addresses are kept (db/evidence/retention.py). One row.
CREATE TABLE evidence_settings (
    singleton         boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    compliance_email  text,
    retention_days    integer CHECK (retention_days IS NULL OR retention_days BETWEEN 1 AND 36500),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
INSERT INTO evidence_settings DEFAULT VALUES;

-- One email per checkpoint to the compliance address, written with the checkpoint (the
-- durable intent: whatever sends it finds it here), then claimed, sent and recorded.
CREATE TABLE evidence_checkpoint_emails (
    checkpoint_id        bigint PRIMARY KEY REFERENCES evidence_checkpoints (id),
    address              text NOT NULL,
    state                text NOT NULL DEFAULT 'pending'
                         CHECK (state IN ('pending', 'sending', 'sent', 'failed')),
    attempts             integer NOT NULL DEFAULT 0,
    lease_until          timestamptz,
    provider_message_id  text,
    error                text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    sent_at              timestamptz
);
CREATE INDEX evidence_checkpoint_emails_open ON evidence_checkpoint_emails (checkpoint_id)
    WHERE state IN ('pending', 'sending');
