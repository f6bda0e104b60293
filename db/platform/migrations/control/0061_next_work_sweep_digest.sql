-- The next-work summary for the sweep and the digest tick (issue 30): beside a scan's next
-- instant, each tenant's next instant at which a sweep can find work there (a lease running
-- out, a retry or a deferral coming due, a delivery stale in the broker, an unknown outcome
-- to reconcile, a claim to repair or to alert on, an alert to publish) and at which a digest
-- can fall due (the earliest digest time of a user with batched items waiting). The sweep
-- and the digest tick send only to the tenants whose instant has come, and to every tenant
-- whose last run of that kind is older than FULL_SCAN_HOURS (the full pass).
--
-- Same conventions as next_scan_at: '-infinity' = due (something changed), 'infinity' =
-- nothing ahead, or a run under way (<kind>_started_at set). The run writes its instant
-- through the same handshake as the scan (db/platform/next_work.py).
ALTER TABLE control.next_work
    ALTER COLUMN next_scan_at SET DEFAULT '-infinity',
    ADD COLUMN next_sweep_at     timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN sweep_started_at  timestamptz,
    ADD COLUMN next_digest_at    timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN digest_started_at timestamptz;

-- Marks the tenant of ``schema`` due for a run of ``kind`` ('scan', 'sweep' or 'digest'),
-- once per transaction, schema and kind, holding the tenant's next-work lock shared until
-- commit (see control.note_scan_work_in, which this generalises: 'scan' goes there).
CREATE FUNCTION control.note_work_in(schema text, kind text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    tenant bigint;
    flag   text := 'tocsin.' || kind || '_work_noted';
BEGIN
    IF kind = 'scan' THEN
        PERFORM control.note_scan_work_in(schema);
        RETURN;
    END IF;
    IF current_setting(flag, true) IS NOT DISTINCT FROM schema THEN
        RETURN;
    END IF;
    SELECT id INTO tenant FROM control.tenants WHERE schema_name = schema;
    IF tenant IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock_shared(7160060, tenant::int);
        IF kind = 'sweep' THEN
            UPDATE control.next_work SET next_sweep_at = '-infinity'
            WHERE tenant_id = tenant AND next_sweep_at <> '-infinity';
        ELSIF kind = 'digest' THEN
            UPDATE control.next_work SET next_digest_at = '-infinity'
            WHERE tenant_id = tenant AND next_digest_at <> '-infinity';
        ELSE
            RAISE EXCEPTION 'no next-work summary of kind %', kind;
        END IF;
    END IF;
    PERFORM set_config(flag, schema, true);
END $$;

-- The row trigger: the kind is the trigger's argument.
CREATE FUNCTION control.note_work() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM control.note_work_in(TG_TABLE_SCHEMA, TG_ARGV[0]);
    RETURN NULL;
END $$;

-- A tenant's zone decides its users' digest times when they set none, and a tenant made
-- active again may have anything waiting: every kind becomes due.
CREATE OR REPLACE FUNCTION control.note_tenant_zone() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM control.note_scan_work_in(NEW.schema_name);
    PERFORM control.note_work_in(NEW.schema_name, 'sweep');
    PERFORM control.note_work_in(NEW.schema_name, 'digest');
    RETURN NULL;
END $$;
