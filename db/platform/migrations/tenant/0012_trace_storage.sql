-- The evaluation trace (events.trace, db/rules/evaluations.py) is written once per event on the
-- relay's hot path and read rarely, by event (the rules console). As jsonb, writing it cost
-- more than everything else the evaluation writes (bench/rules_loading.py): PostgreSQL
-- decomposes every value into its binary form (each number a numeric, each nested object
-- or list a container of its own), which made it nearly twice its text's size, and then
-- compressed that with pglz. As json it is kept as the text written, checked only for
-- being JSON, and its keys stay in the order written. The content is the same; to query
-- into it, cast it (trace::jsonb).
ALTER TABLE events ALTER COLUMN trace TYPE json USING trace::json;

-- lz4 compresses the text for a fraction of pglz's cost where the server is built with it;
-- elsewhere the default (pglz) stays.
DO $$
BEGIN
    ALTER TABLE events ALTER COLUMN trace SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    NULL;
END
$$;
