-- The audit log stays append-only, with one exception the law makes: erasing a person
-- (GDPR article 17, `tocsin evidence erase-person`, db/evidence/erasure.py) rewrites their
-- address and name in every table, the audit log's rows included. The erasure says so for
-- its own transaction only (SET LOCAL tocsin.erasure = 'on'); every other UPDATE, and every
-- DELETE and TRUNCATE, is still refused. The erasure itself is recorded as an audit row.
CREATE OR REPLACE FUNCTION control.refuse_audit_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND current_setting('tocsin.erasure', true) = 'on' THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'the audit log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
