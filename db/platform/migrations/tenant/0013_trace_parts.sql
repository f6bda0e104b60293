-- The phase-2 part of an evaluation trace (the rules phase 2 dropped, one compact entry
-- per reason, each naming its [rule id, version] pairs) depends only on the event's
-- subject kind and the metadata values the rules' trigger filters name, so thousands of
-- events share a handful of them; written into every event's trace it was most of the
-- trace's bytes, and so most of what evaluating an event wrote (bench/rules_loading.py).
-- Each distinct part is stored once here, named by the BLAKE2b-128 digest of its JSON
-- text, and an event's trace names it ({"phase": 2, "fired": false, "trace_part": "<hex>"}).
-- Parts are never updated or deleted: a digest names one text for good.
-- db/rules/evaluations.py stored_trace gives an event's trace with its parts spliced back in.
CREATE TABLE trace_parts (
    digest     bytea PRIMARY KEY CHECK (length(digest) = 16),
    part       json NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
