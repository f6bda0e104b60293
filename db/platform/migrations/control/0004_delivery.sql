-- Delivery trust: each tenant's policy for unknown outcomes, and SNS replay protection.
ALTER TABLE control.tenants ADD COLUMN unknown_outcome_policy text NOT NULL DEFAULT 'resend'
    CHECK (unknown_outcome_policy IN ('resend', 'hold'));

-- Every SNS message accepted once: a replayed MessageId is refused.
CREATE TABLE control.sns_messages (
    message_id  text PRIMARY KEY,
    topic_arn   text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
