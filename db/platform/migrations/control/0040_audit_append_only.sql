-- The audit log of every tenant (tenant migration 0040) is append-only: the one function
-- its triggers call refuses any UPDATE, DELETE or TRUNCATE, whoever runs it. Removing a
-- tenant drops its schema, which fires no row trigger.
CREATE FUNCTION control.refuse_audit_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
