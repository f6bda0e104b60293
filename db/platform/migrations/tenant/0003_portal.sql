-- The portal: invitations, and the indexes behind the evidence pages.

-- One row per invitation sent. The signed link names the row; accepting it is the guarded
-- UPDATE ... WHERE accepted_at IS NULL AND revoked_at IS NULL AND expires_at > now(), so a
-- link works once. The invitee is a user row from the start (no password until accepted),
-- so the invitation notice is an ordinary inbox row and email delivery.
CREATE TABLE invitations (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id     bigint NOT NULL REFERENCES users (id),
    invited_by  bigint NOT NULL REFERENCES users (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    accepted_at timestamptz,
    revoked_at  timestamptz
);
-- At most one open invitation per user: inviting again revokes the previous link.
CREATE UNIQUE INDEX invitations_open ON invitations (user_id)
    WHERE accepted_at IS NULL AND revoked_at IS NULL;

-- The ledger page: newest claims first, filtered by date range.
CREATE INDEX ledger_by_claimed ON notification_ledger (claimed_at DESC, id DESC);
-- Stuck claims: claimed, never delivered (normally a handful at most).
CREATE INDEX ledger_undelivered ON notification_ledger (claimed_at)
    WHERE status = 'claimed' AND delivered_at IS NULL;
-- Deliveries that need a person: failed for good, or an outcome nobody knows.
CREATE INDEX deliveries_needing_attention ON notification_deliveries (updated_at DESC)
    WHERE status IN ('failed', 'unknown', 'bounced', 'complained');
