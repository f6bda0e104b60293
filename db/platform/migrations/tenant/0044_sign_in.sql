-- Single sign-on and two-factor sign-in. One row of sign-in settings per tenant: its OpenID
-- Connect provider (the client secret is kept to call the token endpoint and never shown
-- back), whether password sign-in is on, and whether admins must use two-factor.
CREATE TABLE sign_in_settings (
    singleton          boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    oidc_issuer        text,
    oidc_client_id     text,
    oidc_client_secret text,
    oidc_provider_name text,     -- what the sign-in button says: "Sign in with <name>"
    oidc_allowed_domains text[] NOT NULL DEFAULT '{}',
    oidc_provision_members boolean NOT NULL DEFAULT false,
    password_enabled   boolean NOT NULL DEFAULT true,
    require_two_factor_for_admins boolean NOT NULL DEFAULT false,
    -- Password sign-in off needs a provider to sign in with instead (checked on save too).
    CHECK (password_enabled OR (oidc_issuer IS NOT NULL AND oidc_client_id IS NOT NULL
                                AND oidc_client_secret IS NOT NULL))
);
INSERT INTO sign_in_settings DEFAULT VALUES;

-- A sign-in started at the provider: its state, nonce and PKCE verifier, kept server-side
-- until the provider sends the browser back. Taken (deleted) on the way back: single use.
CREATE TABLE oidc_sign_ins (
    state         text PRIMARY KEY,
    nonce         text NOT NULL,
    code_verifier text NOT NULL,
    next_path     text NOT NULL DEFAULT '/',
    expires_at    timestamptz NOT NULL
);

-- TOTP: the shared secret (set at enrolment, confirmed with a first code), and the last
-- time step accepted, so a code seen once is never accepted again.
ALTER TABLE users
    ADD COLUMN totp_secret       text,
    ADD COLUMN totp_confirmed_at timestamptz,
    ADD COLUMN totp_last_step    bigint;

-- Recovery codes, stored hashed (SHA-256: they are long random strings), each used once.
CREATE TABLE recovery_codes (
    user_id   bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    code_hash text NOT NULL,
    used_at   timestamptz,
    PRIMARY KEY (user_id, code_hash)
);
