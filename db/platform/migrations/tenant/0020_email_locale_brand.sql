-- Localised, branded email (issue 26): a locale per user, a default per client and per
-- tenant (fallback user -> client -> tenant -> en), and the tenant's brand in one row.
ALTER TABLE users ADD COLUMN locale text;
ALTER TABLE clients ADD COLUMN locale text;

CREATE TABLE tenant_brand (
    only_row       boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    display_name   text NOT NULL DEFAULT '',
    colour         text NOT NULL DEFAULT '#1d4ed8' CHECK (colour ~ '^#[0-9a-fA-F]{6}$'),
    sender_name    text NOT NULL DEFAULT '',
    reply_to       text NOT NULL DEFAULT '',
    footer         text NOT NULL DEFAULT '',
    default_locale text,
    logo           bytea CHECK (octet_length(logo) <= 204800),
    logo_type      text CHECK (logo_type IN ('image/png', 'image/jpeg', 'image/svg+xml')),
    logo_sha256    text,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    updated_by     bigint REFERENCES users (id),
    CHECK ((logo IS NULL) = (logo_type IS NULL) AND (logo IS NULL) = (logo_sha256 IS NULL))
);
