-- Phase 1 of the rules engine (db/rules/definitions.py candidate_indexes_of) keeps its answers in each
-- process under the tenant's rules revision. This gives a tenant's rules a new revision in
-- the very statement that changes them (any insert, update, delete or truncate of its
-- rules table, made by Tocsin or by hand), so a kept answer never outlives the rules it was
-- read from. A revision is a random uuid, never a counter: a schema made again starts
-- with a revision no process has seen. The schema is the trigger's own table's, never the
-- caller's search_path.
CREATE OR REPLACE FUNCTION control.bump_rules_revision() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('UPDATE %I.rules_revision SET revision = gen_random_uuid()', TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;
