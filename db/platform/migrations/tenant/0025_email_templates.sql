-- Tenant email templates (issue 26 item 3): per email kind and locale, a subject, preheader
-- and body in the sandboxed Liquid of rule templates. email_templates holds the one in use,
-- email_template_versions every save (who, when, what), a restore being a save of an old
-- version's blocks. An admin's unsaved text for the live preview and the test email is a
-- draft row of its own, never the template recipients get.
CREATE TABLE email_templates (
    kind       text NOT NULL,
    locale     text NOT NULL,
    subject    text NOT NULL,
    preheader  text NOT NULL,
    body       text NOT NULL,
    version    integer NOT NULL CHECK (version > 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by bigint REFERENCES users (id),
    PRIMARY KEY (kind, locale)
);

CREATE TABLE email_template_versions (
    id            bigserial PRIMARY KEY,
    kind          text NOT NULL,
    locale        text NOT NULL,
    version       integer NOT NULL CHECK (version > 0),
    subject       text NOT NULL,
    preheader     text NOT NULL,
    body          text NOT NULL,
    saved_at      timestamptz NOT NULL DEFAULT now(),
    saved_by      bigint REFERENCES users (id),
    restored_from integer,  -- the version whose blocks this save restored
    UNIQUE (kind, locale, version)
);

CREATE TABLE email_template_drafts (
    user_id    bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    kind       text NOT NULL,
    locale     text NOT NULL,
    subject    text NOT NULL,
    preheader  text NOT NULL,
    body       text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, kind, locale)
);

-- A delivery whose tenant template failed at send time went out with the shipped copy; why
-- is kept here, shown in the ledger and on Needs attention.
ALTER TABLE notification_deliveries ADD COLUMN template_fallback text;
ALTER TABLE notification_deliveries ADD COLUMN template_fallback_kind text;
ALTER TABLE notification_deliveries ADD COLUMN template_fallback_locale text;
ALTER TABLE notification_deliveries ADD COLUMN template_fallback_at timestamptz;
CREATE INDEX deliveries_template_fallback ON notification_deliveries (template_fallback_at DESC)
    WHERE template_fallback IS NOT NULL;
