-- Preparation of rule notices (db/notices/rule_notices.py).

-- A contact (a rule's fixed address) can never sign in: it never holds a password.
ALTER TABLE users ADD CONSTRAINT users_contact_without_password
    CHECK (role <> 'contact' OR password_hash IS NULL);

-- The Needs-attention page lists rule claims whose preparation failed for good.
CREATE INDEX ledger_prepare_failed ON notification_ledger (prepare_failed_at DESC)
    WHERE prepare_failed_at IS NOT NULL;
