-- One import engine for two kinds of rows (clients, and subjects of the manual product), and
-- a lease on a running import: a run renews lease_until while it is alive; once it has
-- expired the run's process is taken as dead and the import shows as interrupted, to be
-- resumed or started over. attempt numbers the runs, so a run given up for dead that comes
-- back finds a later one in its place and rolls back.
ALTER TABLE imports DROP CONSTRAINT imports_kind_check;
ALTER TABLE imports ADD CONSTRAINT imports_kind_check CHECK (kind IN ('clients', 'subjects'));
ALTER TABLE imports ADD COLUMN attempt integer NOT NULL DEFAULT 0,
                    ADD COLUMN lease_until timestamptz;
-- Runs from before leases: given a minute to finish, then shown as interrupted if they have not.
UPDATE imports SET lease_until = now() + interval '1 minute', attempt = 1 WHERE stage = 'running';
