-- The tenant's own monthly SMS spend cap (db/people/sms_settings.py), set by its administrators
-- on the Channels page; never above the operator's SMS_MONTHLY_SPEND_CAP, which applies when
-- there is no row. One row at most.
CREATE TABLE sms_spend_cap (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    cap        numeric(12, 2) NOT NULL CHECK (cap >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
