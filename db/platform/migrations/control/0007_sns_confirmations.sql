-- SNS hardening: seen message ids are pruned by age (the index keeps that cheap), and each
-- subscription confirmation is recorded, so a replayed one is refused without a request.
CREATE INDEX sns_messages_received_at ON control.sns_messages (received_at);

CREATE TABLE control.sns_subscriptions (
    token_sha256 text PRIMARY KEY,  -- the confirmation token's hash: the token itself is a secret
    topic_arn    text NOT NULL,
    message_id   text NOT NULL,
    confirmed_at timestamptz NOT NULL DEFAULT now()
);
