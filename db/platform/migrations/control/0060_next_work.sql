-- The next-work summary (issue 30): per tenant, the next instant at which a scan can find
-- work there, so that a tick visits only the tenants whose instant has come instead of all
-- of them. db/platform/next_work.py reads and writes it; the scan computes the instant
-- (db/notices/scan_horizon.py) and the tenant tables' triggers (tenant migration 0060) make
-- the tenant due again in the same transaction as any change the scan reads.
--
-- next_scan_at: '-infinity' = due at the next tick (something changed); 'infinity' = nothing
-- ahead, or a scan under way (scan_started_at set). A tenant without a row is due.
CREATE TABLE control.next_work (
    tenant_id       bigint PRIMARY KEY REFERENCES control.tenants (id) ON DELETE CASCADE,
    next_scan_at    timestamptz NOT NULL,
    scan_started_at timestamptz,  -- set while a scan is under way; a stale one is due again
    computed_at     timestamptz   -- when a scan last wrote next_scan_at
);

-- Called by the triggers of the tables a scan reads (and by note_scan_work in Python):
-- marks the tenant of the table's schema due. Once per transaction and schema (a flag in a
-- transaction-local setting), so a bulk insert pays it once. The shared advisory lock,
-- held to commit, makes a scan's start (an exclusive lock on the same key) wait for every
-- transaction that changed something and has not committed yet: whatever such a
-- transaction wrote is either seen by the scan, or marks the tenant due after the scan
-- started, which the scan's own write of the summary then respects.
CREATE FUNCTION control.note_scan_work_in(schema text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    tenant bigint;
BEGIN
    IF current_setting('tocsin.scan_work_noted', true) IS NOT DISTINCT FROM schema THEN
        RETURN;
    END IF;
    SELECT id INTO tenant FROM control.tenants WHERE schema_name = schema;
    IF tenant IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock_shared(7160060, tenant::int);
        UPDATE control.next_work SET next_scan_at = '-infinity'
        WHERE tenant_id = tenant AND next_scan_at <> '-infinity';
    END IF;
    PERFORM set_config('tocsin.scan_work_noted', schema, true);
END $$;

CREATE FUNCTION control.note_scan_work() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM control.note_scan_work_in(TG_TABLE_SCHEMA);
    RETURN NULL;
END $$;

-- A tenant's default zone decides its clients' "today": a change makes it due.
CREATE FUNCTION control.note_tenant_zone() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM control.note_scan_work_in(NEW.schema_name);
    RETURN NULL;
END $$;

CREATE TRIGGER tenants_note_scan_work AFTER UPDATE OF time_zone, status ON control.tenants
FOR EACH ROW WHEN (OLD.time_zone IS DISTINCT FROM NEW.time_zone OR OLD.status IS DISTINCT FROM NEW.status)
EXECUTE FUNCTION control.note_tenant_zone();
