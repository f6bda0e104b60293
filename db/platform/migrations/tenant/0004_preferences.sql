-- Preferences, quiet hours and digests (issue 4).

-- A user's own choice per category. The frequency governs email; in_app is the inbox.
CREATE TABLE notification_preferences (
    user_id    bigint NOT NULL REFERENCES users (id),
    category   text NOT NULL CHECK (category IN (
                 'document_review', 'questionnaire_assigned', 'response_revision',
                 'policy_approved', 'report_ready', 'license_expiring', 'member_invite',
                 'vendor_questionnaire')),
    in_app     boolean NOT NULL,
    email      boolean NOT NULL,
    frequency  text NOT NULL CHECK (frequency IN ('instant', 'daily_digest', 'weekly', 'off')),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, category)
);

-- The tenant's default per category. A locked default overrides every user's choice and
-- says why; a critical category bypasses quiet hours.
CREATE TABLE category_defaults (
    category    text PRIMARY KEY CHECK (category IN (
                  'document_review', 'questionnaire_assigned', 'response_revision',
                  'policy_approved', 'report_ready', 'license_expiring', 'member_invite',
                  'vendor_questionnaire')),
    in_app      boolean NOT NULL,
    email       boolean NOT NULL,
    frequency   text NOT NULL CHECK (frequency IN ('instant', 'daily_digest', 'weekly', 'off')),
    locked      boolean NOT NULL DEFAULT false,
    lock_reason text,
    critical    boolean NOT NULL DEFAULT false,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  bigint REFERENCES users (id),
    CHECK (NOT locked OR length(btrim(lock_reason)) > 0)
);

-- A user's clock: quiet hours (local wall times, may cross midnight), digest time and
-- weekly digest day (ISO, 1 = Monday). The zone is users.time_zone, else the tenant's.
CREATE TABLE delivery_schedules (
    user_id     bigint PRIMARY KEY REFERENCES users (id),
    quiet_start time,
    quiet_end   time,
    digest_time time NOT NULL DEFAULT '08:00',
    weekly_day  smallint NOT NULL DEFAULT 1 CHECK (weekly_day BETWEEN 1 AND 7),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((quiet_start IS NULL) = (quiet_end IS NULL)),
    CHECK (quiet_start IS NULL OR quiet_start <> quiet_end)
);

-- One digest per (user, period), claimed in notification_ledger (rule 'digest').
CREATE TABLE digests (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_id   bigint NOT NULL UNIQUE REFERENCES notification_ledger (id),
    user_id     bigint NOT NULL REFERENCES users (id),
    period      text NOT NULL CHECK (period IN ('daily', 'weekly')),
    period_date date NOT NULL,
    cutoff      timestamptz NOT NULL,  -- items batched before this instant belong here
    item_count  integer NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- A delivery is of a notification or of a digest, never both, never neither. Batched
-- item rows name the period they wait for and, once taken, the digest that took them.
ALTER TABLE notification_deliveries
    ALTER COLUMN notification_id DROP NOT NULL,
    ADD COLUMN digest_id bigint REFERENCES digests (id),
    ADD COLUMN batch_period text CHECK (batch_period IN ('daily', 'weekly')),
    ADD COLUMN batched_at timestamptz,
    ADD COLUMN in_digest_id bigint REFERENCES digests (id),
    ADD CONSTRAINT delivery_of_one_thing CHECK (num_nonnulls(notification_id, digest_id) = 1),
    ADD CONSTRAINT batched_names_its_period
        CHECK (status <> 'batched' OR (batch_period IS NOT NULL AND batched_at IS NOT NULL));
CREATE UNIQUE INDEX deliveries_one_per_digest ON notification_deliveries (digest_id, channel)
    WHERE digest_id IS NOT NULL;
CREATE INDEX deliveries_waiting_for_digest ON notification_deliveries (batch_period, batched_at)
    WHERE status = 'batched' AND in_digest_id IS NULL;
CREATE INDEX deliveries_in_digest ON notification_deliveries (in_digest_id) WHERE in_digest_id IS NOT NULL;
CREATE INDEX deliveries_deferred ON notification_deliveries (send_after) WHERE status = 'deferred';

-- The SQL twins of domain/delivery/quiet_hours.py (a test checks they agree on transition days).
-- The first instant after `after` whose local wall time in `tz` is at or past `target`:
-- the target when it exists once, its first occurrence still ahead when it exists twice
-- (fall back), the jump itself when it was skipped (spring forward).
CREATE FUNCTION first_instant_at_or_after(target timestamp, tz text, after timestamptz)
RETURNS timestamptz LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE
    guess timestamptz := target AT TIME ZONE tz;
    best  timestamptz;
    cand  timestamptz;
    lo    timestamptz;
    hi    timestamptz;
    mid   timestamptz;
    shift interval;
BEGIN
    -- The offsets in force six hours either side: one of them is the target's (or both are).
    FOREACH shift IN ARRAY ARRAY[interval '-6 hours', interval '6 hours'] LOOP
        cand := (target - (((guess + shift) AT TIME ZONE tz) - ((guess + shift) AT TIME ZONE 'UTC')))
                AT TIME ZONE 'UTC';
        IF (cand AT TIME ZONE tz) = target AND cand > after AND (best IS NULL OR cand < best) THEN
            best := cand;
        END IF;
    END LOOP;
    IF best IS NOT NULL THEN
        RETURN best;
    END IF;
    -- Skipped: local time only moves forward around a spring-forward; bisect to the second.
    lo := guess - interval '7 hours';
    hi := guess + interval '7 hours';
    WHILE hi - lo > interval '1 second' LOOP
        mid := date_trunc('second', lo + (hi - lo) / 2);
        IF (mid AT TIME ZONE tz) >= target THEN hi := mid; ELSE lo := mid; END IF;
    END LOOP;
    RETURN hi;
END
$$;

-- When the quiet window containing `now` ends, or NULL when `now` is outside it (or the
-- user keeps no quiet hours). Windows are [start, end) and may cross midnight.
CREATE FUNCTION quiet_hours_end(now timestamptz, tz text, q_start time, q_end time)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN q_start IS NULL OR q_end IS NULL THEN NULL
        WHEN CASE WHEN q_start < q_end THEN l.t >= q_start AND l.t < q_end
                  ELSE l.t >= q_start OR l.t < q_end END
        THEN first_instant_at_or_after(
                 (CASE WHEN q_end > l.t THEN l.d ELSE l.d + 1 END) + q_end, tz, now)
    END
    FROM (SELECT (now AT TIME ZONE tz)::time AS t, (now AT TIME ZONE tz)::date AS d) AS l
$$;
